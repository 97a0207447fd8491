package testkit

import (
	"context"
	"log/slog"
)

// Events is a slog.Handler that sends each record's message (the event
// name, at any level) on C, dropping it when C is full: a test waits on C
// for the event that says a step was reached instead of sleeping.
type Events struct{ C chan string }

// NewEvents returns Events with a channel of n messages' room.
func NewEvents(n int) Events { return Events{C: make(chan string, n)} }

// Enabled implements slog.Handler: every level.
func (Events) Enabled(context.Context, slog.Level) bool { return true }

// Handle implements slog.Handler.
func (h Events) Handle(_ context.Context, r slog.Record) error {
	select {
	case h.C <- r.Message:
	default:
	}
	return nil
}

// WithAttrs implements slog.Handler; attributes are not kept.
func (h Events) WithAttrs([]slog.Attr) slog.Handler { return h }

// WithGroup implements slog.Handler; groups are not kept.
func (h Events) WithGroup(string) slog.Handler { return h }
