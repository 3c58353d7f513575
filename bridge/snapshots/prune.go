package snapshots

import (
	"errors"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// Prune removes the expired snapshots of every owner, and what writers
// that died left: temporary folders no writer holds, folders retired but
// not yet removed, owner folders left empty. Damaged snapshots stay (they
// are logged; `bridge snapshots rm` removes one), and so do expired ones
// a restore holds (OpenMemory), until a Prune after it ends. It returns
// the snapshots it removed as expired.
func (s *Store) Prune() ([]Entry, error) {
	if err := s.enter(); err != nil {
		return nil, err
	}
	defer s.leave()
	unlock, err := s.lock(unix.LOCK_EX)
	if err != nil {
		return nil, err
	}
	var removed []Entry
	var olds []retired
	err = s.eachOwner(func(of *os.File) {
		es, paths := s.pruneOwner(of)
		removed = append(removed, es...)
		olds = append(olds, paths...)
	})
	unlock()
	s.discard(olds...)
	events := make([]Event, len(removed))
	for i, e := range removed {
		events[i] = Event{Action: ActionExpired, Entry: e}
	}
	s.emit(events...)
	if len(removed) > 0 {
		s.log.Info().Int("snapshots", len(removed)).Str("dir", s.dir).Msg("snapshots: removed expired snapshots")
	}
	return removed, err
}

// pruneOwner retires an owner's expired snapshots and leftovers, under
// the exclusive lock, or removes its folder if it is empty.
func (s *Store) pruneOwner(of *os.File) ([]Entry, []retired) {
	f := s.scan(of)
	if len(f.entries)+len(f.tmps)+len(f.olds)+len(f.damaged) == 0 {
		// Fails, harmlessly, if something else is in it.
		_ = unix.Unlinkat(s.fd, filepath.Base(of.Name()), unix.AT_REMOVEDIR)
		return nil, nil
	}
	var removed []Entry
	var rs []retired
	oname := filepath.Base(of.Name())
	for _, old := range f.olds {
		rs = append(rs, retired{oname, old})
	}
	for _, tmp := range f.tmps {
		if !abandoned(int(of.Fd()), tmp) {
			continue
		}
		if r, err := s.retire(of, tmp); err == nil {
			rs = append(rs, r)
		}
	}
	now := s.now()
	for _, e := range f.entries {
		if now.Before(e.Expires) {
			continue
		}
		// A restore holds it: the next sweep removes it.
		if fd, held := isHeld(int(of.Fd()), e.Label); held {
			unix.Close(fd)
			continue
		}
		r, err := s.retire(of, e.Label)
		if err != nil {
			s.log.Warn().Err(err).Msg("snapshots: could not remove an expired snapshot")
			continue
		}
		removed = append(removed, e)
		rs = append(rs, r)
	}
	return removed, rs
}

// abandoned says whether the temporary folder tmp of the owner folder
// odfd is no writer's: a writer holds its lock (flock) from before Prune
// can see it until it ends. What is not a folder is no writer's either.
func abandoned(odfd int, tmp string) bool {
	fd, err := unix.Openat(odfd, tmp, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return !errors.Is(err, unix.ENOENT)
	}
	defer unix.Close(fd)
	return unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB) == nil
}

// sweep is the timer's: Prune, then again after SweepEvery.
func (s *Store) sweep() {
	if _, err := s.Prune(); err != nil && !errors.Is(err, ErrClosed) {
		s.log.Warn().Err(err).Str("dir", s.dir).Msg("snapshots: sweeping expired snapshots")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.closed && s.timer != nil {
		s.timer.Reset(s.sweepEvery)
	}
}
