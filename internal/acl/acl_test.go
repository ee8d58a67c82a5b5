package acl

import (
	"errors"
	"reflect"
	"testing"
)

// u::rwx,u:1000:rwx,g::r-x,g:50:rw-,m::rwx,o::r-x as setfacl sends it.
var named = ACL{
	{UserObj, 7, undefinedID},
	{User, 7, 1000},
	{GroupObj, 5, undefinedID},
	{Group, 6, 50},
	{Mask, 7, undefinedID},
	{Other, 5, undefinedID},
}

func TestAnACLSurvivesItsBinaryForm(t *testing.T) {
	got, err := Parse(named.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, named) {
		t.Fatalf("got %v, want %v", got, named)
	}
}

func TestAHeaderWithoutEntriesIsTheEmptyACL(t *testing.T) {
	got, err := Parse(ACL{}.Bytes())
	if err != nil || got != nil {
		t.Fatalf("got %v, %v; want nil, nil", got, err)
	}
}

func TestMalformedACLsAreRefused(t *testing.T) {
	withVersion := func(v byte) []byte { b := named.Bytes(); b[0] = v; return b }
	cases := map[string][]byte{
		"shorter than the header": {2, 0},
		"another version":         withVersion(1),
		"a partial entry":         append(named.Bytes(), 1, 2, 3),
		"no other entry":          named[:5].Bytes(),
		"a named user, no mask": ACL{{UserObj, 7, undefinedID}, {User, 7, 1000},
			{GroupObj, 5, undefinedID}, {Other, 5, undefinedID}}.Bytes(),
		"two owner entries": ACL{{UserObj, 7, undefinedID}, {UserObj, 7, undefinedID},
			{GroupObj, 5, undefinedID}, {Other, 5, undefinedID}}.Bytes(),
		"group before owner": ACL{{GroupObj, 5, undefinedID}, {UserObj, 7, undefinedID},
			{Other, 5, undefinedID}}.Bytes(),
		"bits beyond rwx": ACL{{UserObj, 8, undefinedID}, {GroupObj, 5, undefinedID},
			{Other, 5, undefinedID}}.Bytes(),
		"an unknown tag": ACL{{UserObj, 7, undefinedID}, {GroupObj, 5, undefinedID},
			{0x40, 5, undefinedID}}.Bytes(),
	}
	for name, b := range cases {
		if _, err := Parse(b); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: got %v, want ErrInvalid", name, err)
		}
	}
}

func TestTheModeShowsTheMaskAsGroupBits(t *testing.T) {
	perm, equiv := named.Mode()
	if perm != 0o775 || equiv {
		t.Fatalf("got %o, %v; want 775 (group bits from the mask), not equivalent", perm, equiv)
	}
	plain := ACL{{UserObj, 6, undefinedID}, {GroupObj, 4, undefinedID}, {Other, 0, undefinedID}}
	if perm, equiv := plain.Mode(); perm != 0o640 || !equiv {
		t.Fatalf("got %o, %v; want 640, equivalent", perm, equiv)
	}
}

func TestChmodSetsTheMaskNotTheGroupEntry(t *testing.T) {
	got := named.Chmod(0o640)
	want := ACL{
		{UserObj, 6, undefinedID},
		{User, 7, 1000},
		{GroupObj, 5, undefinedID},
		{Group, 6, 50},
		{Mask, 4, undefinedID},
		{Other, 0, undefinedID},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	if named[4].Perm != 7 {
		t.Fatal("Chmod changed the ACL it was given")
	}
	plain := ACL{{UserObj, 6, undefinedID}, {GroupObj, 4, undefinedID}, {Other, 0, undefinedID}}
	if got := plain.Chmod(0o751); got[1].Perm != 5 {
		t.Fatalf("without a mask the group entry takes the group bits: %v", got)
	}
}

func TestANewFileInheritsTheDefaultACLLimitedByItsMode(t *testing.T) {
	access, mode := Inherit(named, 0o100644)
	want := ACL{
		{UserObj, 6, undefinedID},
		{User, 7, 1000}, // limited by the mask, not changed
		{GroupObj, 5, undefinedID},
		{Group, 6, 50},
		{Mask, 4, undefinedID},
		{Other, 4, undefinedID},
	}
	if mode != 0o100644 || !reflect.DeepEqual(access, want) {
		t.Fatalf("got %o %v, want 100644 %v", mode, access, want)
	}
	// A new directory (mode 0777 before any umask) gets all of it.
	access, mode = Inherit(named, 0o040777)
	if mode != 0o040775 || !reflect.DeepEqual(access, named) {
		t.Fatalf("directory: got %o %v", mode, access)
	}
}

func TestADefaultACLWithoutNamedEntriesOnlySetsTheMode(t *testing.T) {
	def := ACL{{UserObj, 7, undefinedID}, {GroupObj, 5, undefinedID}, {Other, 0, undefinedID}}
	access, mode := Inherit(def, 0o100666)
	if access != nil || mode != 0o100640 {
		t.Fatalf("got %v %o, want no ACL and mode 100640", access, mode)
	}
	// Set-ID bits of the requested mode are kept.
	if _, mode := Inherit(def, 0o102777); mode != 0o102750 {
		t.Fatalf("got %o, want 102750", mode)
	}
}
