package fuse

// WaitMounted is WaitMount without the poll hack, for a server that never
// opens files on its own mount (the hack guards such servers against the
// kernel's POLL requests, which every server answers with ENOSYS anyway).
// The hack's open is a request from the server to itself: if it is never
// answered (over io_uring it was seen stuck in a queue at start-up), or the
// process is killed before it is, that thread can never end, nor the
// process, which then cannot be killed.
func (ms *Server) WaitMounted() error {
	return <-ms.ready
}
