//go:build !linux

package kubernetes

import "errors"

// linuxNode stands for the node's work, which only Linux can do.
type linuxNode struct{}

var errNotLinux = errors.New("the kubernetes engine runs on a Linux node")

func (linuxNode) mountTmp(string, int64) error        { return errNotLinux }
func (linuxNode) bindReadOnly(string, string) error   { return errNotLinux }
func (linuxNode) unmount(string) error                { return nil }
func (linuxNode) setPids(string, string, int64) error { return errNotLinux }
func (linuxNode) canSetPids() (bool, string)          { return false, errNotLinux.Error() }
func localCgroupVersion() string                      { return "" }
