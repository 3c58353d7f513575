// Package layout holds no code: its test keeps the floor plan that
// docs/architecture.md draws. The core links no engine client; each engine
// package imports its own client and none of the others; only
// sandbox/detect and cmd/bridge know all the engines; and no function of
// bridge/, sandbox/ or proxy/ grows past 100 lines.
package layout
