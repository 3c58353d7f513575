package snapshots

import "github.com/bridge-mcp/bridge/policy"

// Audit is an Options.OnEvent that writes each event to the audit
// (a `snapshot` record, docs/policy.md). The records of a save carry no
// run: a caller that knows it audits the save itself (policy.Auditor's
// Snapshot, with RunID and Session) and passes the other events here.
func Audit(a *policy.Auditor) func(Event) {
	return func(ev Event) { a.Snapshot(Record(ev)) }
}

// Record is ev as an audit record.
func Record(ev Event) policy.SnapshotRecord {
	return policy.SnapshotRecord{Action: ev.Action, Owner: ev.Entry.Owner, Label: ev.Entry.Label, Kind: ev.Entry.Kind, Bytes: ev.Entry.Size, MemoryBytes: ev.Entry.MemoryBytes, Reason: ev.Reason}
}
