package bwrap

import "golang.org/x/sys/unix"

func unixAccessW(p string) error { return unix.Access(p, unix.W_OK) }
