package proto

// opNames name every operation code, for metrics and log lines. The
// names are stable: dashboards and alerts select on them.
var opNames = map[uint16]string{
	OpLookup:           "lookup",
	OpGetAttr:          "getattr",
	OpSetAttr:          "setattr",
	OpCreate:           "create",
	OpLink:             "link",
	OpUnlink:           "unlink",
	OpRename:           "rename",
	OpReadDir:          "readdir",
	OpWriteInline:      "write_inline",
	OpUninline:         "uninline",
	OpCommitWrite:      "commit_write",
	OpGetXattr:         "getxattr",
	OpSetXattr:         "setxattr",
	OpListXattr:        "listxattr",
	OpRemoveXattr:      "removexattr",
	OpSetStripe:        "set_stripe",
	OpStatFs:           "statfs",
	OpRelease:          "release",
	OpClusterMap:       "cluster_map",
	OpRegisterServer:   "register_server",
	OpHeartbeat:        "heartbeat",
	OpSessionKeepalive: "session_keepalive",
	OpStatus:           "status",
	OpSync:             "sync",
	OpResyncDone:       "resync_done",
	OpTargetFailed:     "target_failed",
	OpWatch:            "watch",
	OpSetLock:          "set_lock",
	OpGetLock:          "get_lock",
	OpDirLease:         "dir_lease",
	OpFileLease:        "file_lease",
	OpQuotaSet:         "quota_set",
	OpQuotaList:        "quota_list",
	OpNFSLease:         "nfs_lease",
	OpECGen:            "ec_gen",
	OpECStripes:        "ec_stripes",
	OpECScrub:          "ec_scrub",
	OpOpenWrite:        "open_write",
	OpConvertBegin:     "convert_begin",
	OpConvertCommit:    "convert_commit",
	OpTargetRecovered:  "target_recovered",
	OpFileLeaseRelease: "file_lease_release",

	OpChunkWrite:    "chunk_write",
	OpChunkRead:     "chunk_read",
	OpChunkTruncate: "chunk_truncate",
	OpChunkSync:     "chunk_sync",
	OpChunkDelete:   "chunk_delete",
	OpChunkList:     "chunk_list",
	OpChunkRepair:   "chunk_repair",
	OpScrubStart:    "scrub_start",
	OpChunkReadSent: "chunk_read_sent",
}

// OpName names operation code op, or returns "unknown" for a code no
// service defines (a malformed request must not mint new names).
func OpName(op uint16) string {
	if n, ok := opNames[op]; ok {
		return n
	}
	return "unknown"
}
