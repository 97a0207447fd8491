package bwrap

import "golang.org/x/sys/unix"

func unixAddKey(keyType, desc string, payload []byte) (int, error) {
	return unix.AddKey(keyType, desc, payload, unix.KEY_SPEC_SESSION_KEYRING)
}

func unixRevoke(id int) { _, _ = unix.KeyctlInt(unix.KEYCTL_REVOKE, id, 0, 0, 0) }
