// Package snapshots keeps the saved states of sessions on disk, by owner
// (the principal a session belongs to, "local" over stdio) and label (a
// name the agent picks, as a session name is), under the policy's
// snapshots bounds. A snapshot is a folder holding its data (files.tar,
// the session's /tmp as a tar stream) and meta.json (its label, owner,
// kind, size, when it was made, the image, engine and OCI runtime it was
// made with, and a small map of the caller's); a [Writer] writes one and
// makes it appear whole or not at all, and [Store.Get] streams it back.
// A memory snapshot (KindMemory) holds as well a folder memory/, the
// engine's checkpoint of the session's processes: [Writer.MemoryDir]
// makes it, Commit counts it in the owner's bounds, and
// [Store.OpenMemory] holds it in place for a restore.
//
// The folder is the only state: a [Store] re-reads it on each call, so
// snapshots survive a restart, and two bridges of one user may share it
// (changes are renames under a lock file, never an index two processes
// would race on). Owners are hashed into folder names, so any principal
// name is safe in a path; a label is looked up only in its owner's folder,
// so another owner's label is not found, exactly as a missing one.
//
// The package neither runs sessions nor speaks MCP: the bridge packs a
// session's /tmp into a [Writer] and unpacks what Get returns.
package snapshots
