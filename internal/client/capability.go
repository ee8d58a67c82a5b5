package client

import "tandemfs/internal/proto"

// The kernel asks for security.capability before a write to a file
// without set-user-ID bits (to drop file capabilities when an unprivileged
// user writes). An open file remembers that the attribute is absent, so
// that only the first write of an open costs a metadata call, and a file
// this client just created starts out knowing it: a new file has no
// extended attributes. The knowledge is dropped when this client sets or
// removes an attribute, and when the watch shows any change to the inode
// by another client (or may have missed one); an epoch counter keeps an
// answer that was on its way during such a change from being believed.
const capabilityXattr = "security.capability"

func (st *fileState) capabilityAbsent() bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.capAbsent
}

// capabilityEpoch is taken before asking the metadata service, and handed
// to learnCapabilityAbsent with its answer.
func (st *fileState) capabilityEpoch() uint64 {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.capEpoch
}

// learnCapabilityAbsent records an answer asked for at epoch, unless the
// inode changed since.
func (st *fileState) learnCapabilityAbsent(epoch uint64) {
	st.mu.Lock()
	if st.capEpoch == epoch {
		st.capAbsent = true
	}
	st.mu.Unlock()
}

func (st *fileState) forgetCapability() {
	st.mu.Lock()
	st.capAbsent = false
	st.capEpoch++
	st.mu.Unlock()
}

// forgetCapability drops the known absence of security.capability on ino.
func (c *Client) forgetCapability(ino uint64) {
	if st := c.lookupState(ino); st != nil {
		st.forgetCapability()
	}
}

// forgetAllCapabilities drops it for every open file (the watch was lost).
func (c *Client) forgetAllCapabilities() {
	c.filesMu.Lock()
	states := make([]*fileState, 0, len(c.files))
	for _, st := range c.files {
		states = append(states, st)
	}
	c.filesMu.Unlock()
	for _, st := range states {
		st.forgetCapability()
	}
}

// OpenCreated opens n, a regular file this client has just created (n is
// the create's reply), knowing that it has no extended attributes yet.
func (c *Client) OpenCreated(n *proto.Inode, flags uint32) (*Handle, error) {
	h, err := c.Open(n, flags)
	if err != nil {
		return nil, err
	}
	// Changes seen from now on reach the open state; one seen between
	// the create and now is in the namespace cache's record.
	if !c.ns.changedSince(n.Ino, n.Version) {
		h.st.learnCapabilityAbsent(h.st.capabilityEpoch())
	}
	return h, nil
}
