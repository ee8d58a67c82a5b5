module github.com/buildbarn/go-xdr

go 1.21

require golang.org/x/sync v0.23.0
