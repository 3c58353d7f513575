package sandbox

import "context"

// An engine whose containers ask for room the node holds for them (the
// CPU and memory requests of a Kubernetes pod) may have none when a run
// starts: other runs hold it, and so do the warm pool's ready containers,
// which no run uses yet. Its Start then waits for room and tries again.
// A caller that can free room, or has a container of its own to offer
// instead, says so with a hook carried by the context, as net/http/httptrace
// carries its hooks down the layers that pass ctx on.

type noRoomKey struct{}

// WithNoRoom returns a copy of ctx whose engine Start calls f each time the
// engine rejects the container for want of room, with the engine's reason.
// When f returns true, Start gives up at once (it removes what it made)
// with an error that wraps [ErrNoRoom]; when false, it waits and tries
// again, as without f, until ctx ends. f runs on Start's goroutine.
func WithNoRoom(ctx context.Context, f func(reason string) bool) context.Context {
	return context.WithValue(ctx, noRoomKey{}, f)
}

// NoRoom is what an engine's Start calls when the engine has no room for
// the container now (reason, as the engine says it): it reports whether
// the caller wants Start to give up ([WithNoRoom]); false when the caller
// set no hook.
func NoRoom(ctx context.Context, reason string) bool {
	f, _ := ctx.Value(noRoomKey{}).(func(string) bool)
	return f != nil && f(reason)
}
