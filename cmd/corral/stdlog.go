package main

import (
	"bytes"
	"io"
	"log"
)

// withheldLog is where the standard library's own log lines go (net/http
// writes to the log package: "Unsolicited response received on idle HTTP
// channel starting with ..."). Such a line can quote bytes a server sent
// to a sandbox's proxy, a secret's real value among them, so only its
// text up to the first quote is kept.
type withheldLog struct{ w io.Writer }

func (l withheldLog) Write(p []byte) (int, error) {
	line := bytes.TrimRight(p, "\n")
	if i := bytes.IndexAny(line, "\"`"); i >= 0 {
		line = append(line[:i:i], "... (network data withheld)"...)
	}
	_, err := l.w.Write(append(append([]byte("corral: "), line...), '\n'))
	return len(p), err
}

func init() {
	log.SetFlags(0)
	log.SetOutput(withheldLog{stderr})
}
