package snapshots

import (
	"errors"
	"fmt"
)

// Errors of a [Store], to test with errors.Is; the errors returned say
// more, and what to do.
var (
	// ErrNotFound: no such snapshot for this owner (another owner's label
	// is not found either, with the same message), or one that expired.
	ErrNotFound = errors.New("no such snapshot")
	// ErrExpired: the snapshot outlived the TTL. It is ErrNotFound too.
	ErrExpired = errors.New("the snapshot expired")
	// ErrTooLarge: the snapshot being written passed MaxBytes.
	ErrTooLarge = errors.New("the snapshot is too large")
	// ErrInvalid: an owner, label or Meta the store does not take.
	ErrInvalid = errors.New("invalid snapshot")
	// ErrClosed: the store was closed.
	ErrClosed = errors.New("the snapshot store is closed")
)

// kindError is an error with a message of its own and the kinds above it
// is.
type kindError struct {
	msg   string
	kinds []error
}

func (e *kindError) Error() string { return e.msg }

func (e *kindError) Is(target error) bool {
	for _, k := range e.kinds {
		if target == k {
			return true
		}
	}
	return false
}

func invalidf(format string, args ...any) error {
	return &kindError{fmt.Sprintf(format, args...), []error{ErrInvalid}}
}

// notFound is the error for a label the owner has not: the same whether
// the label is missing, damaged, or another owner's.
func notFound(label string) error {
	return &kindError{fmt.Sprintf("no snapshot %q: save one with that label first (labels are per client; expired ones are removed)", label), []error{ErrNotFound}}
}

func expired(e Entry, ttl string) error {
	return &kindError{fmt.Sprintf("snapshot %q expired %s after it was saved (snapshots.ttl) and is removed: save it again", e.Label, ttl), []error{ErrExpired, ErrNotFound}}
}

func errClosed() error {
	return &kindError{"the snapshot store is closed (the bridge is shutting down)", []error{ErrClosed}}
}
