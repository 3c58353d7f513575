// Package artifacts turns the files a run wrote under /tmp/outputs into
// the artifacts of its result, under the policy's artifacts limits: a
// [Collector] takes the files as they arrive (the file half of
// [sandbox.Sink]), puts small ones inline, hands large ones to a [Store] that
// keeps them in a host folder by reference (bridge://runs/RUN/FILE), and
// lists the rest with why they were not returned. Classify says what a
// file is (image, text or bytes) from its signature, name and bytes.
//
// The package neither renders results nor speaks MCP: the bridge turns
// Artifacts into content and serves a [Store]'s files as resources.
package artifacts
