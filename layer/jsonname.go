package layer

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"unicode/utf8"
)

// jsonBytes is a file name or symlink target as the layer's JSON files
// (base.json, the journal, the spools) hold it, without loss: a name is
// bytes (path_resolution(7)), and encoding/json writes each byte of a
// string that is not UTF-8 as U+FFFD, so that "n\xff\x80" came back as
// "n\uFFFD\uFFFD": apply then looked for a file that is not there, or
// took two names for one and found its base out of order, for good, and
// discard with it. Valid UTF-8 is written as a JSON string, as before
// (files written by an older corral read the same); anything else as
// {"base64": "..."} (RFC 4648 section 4).
type jsonBytes string

// MarshalJSON implements json.Marshaler.
func (b jsonBytes) MarshalJSON() ([]byte, error) {
	if utf8.ValidString(string(b)) {
		return json.Marshal(string(b))
	}
	return json.Marshal(struct {
		Base64 string `json:"base64"`
	}{base64.StdEncoding.EncodeToString([]byte(b))})
}

// UnmarshalJSON implements json.Unmarshaler.
func (b *jsonBytes) UnmarshalJSON(data []byte) error {
	if len(data) > 0 && data[0] == '{' {
		var o struct {
			Base64 *string `json:"base64"`
		}
		if err := json.Unmarshal(data, &o); err != nil {
			return err
		}
		if o.Base64 == nil {
			return fmt.Errorf("a name as an object without base64: %s", data)
		}
		raw, err := base64.StdEncoding.DecodeString(*o.Base64)
		if err != nil {
			return fmt.Errorf("a name in base64: %w", err)
		}
		*b = jsonBytes(raw)
		return nil
	}
	var s string
	if err := json.Unmarshal(data, &s); err != nil {
		return err
	}
	*b = jsonBytes(s)
	return nil
}

// MarshalJSON implements json.Marshaler: Path and Target as jsonBytes.
func (e Entry) MarshalJSON() ([]byte, error) {
	type plain Entry
	return json.Marshal(struct {
		plain
		Path   jsonBytes `json:"path"`
		Target jsonBytes `json:"target,omitempty"`
	}{plain(e), jsonBytes(e.Path), jsonBytes(e.Target)})
}

// UnmarshalJSON implements json.Unmarshaler.
func (e *Entry) UnmarshalJSON(data []byte) error {
	type plain Entry
	aux := struct {
		*plain
		Path   jsonBytes `json:"path"`
		Target jsonBytes `json:"target,omitempty"`
	}{plain: (*plain)(e)}
	if err := json.Unmarshal(data, &aux); err != nil {
		return err
	}
	e.Path, e.Target = string(aux.Path), string(aux.Target)
	return nil
}

func (e journalEntry) MarshalJSON() ([]byte, error) {
	type plain journalEntry
	return json.Marshal(struct {
		plain
		Path   jsonBytes `json:"path"`
		Target jsonBytes `json:"target,omitempty"`
		Merge  jsonBytes `json:"merge,omitempty"`
	}{plain(e), jsonBytes(e.Path), jsonBytes(e.Target), jsonBytes(e.Merge)})
}

func (e *journalEntry) UnmarshalJSON(data []byte) error {
	type plain journalEntry
	aux := struct {
		*plain
		Path   jsonBytes `json:"path"`
		Target jsonBytes `json:"target,omitempty"`
		Merge  jsonBytes `json:"merge,omitempty"`
	}{plain: (*plain)(e)}
	if err := json.Unmarshal(data, &aux); err != nil {
		return err
	}
	e.Path, e.Target, e.Merge = string(aux.Path), string(aux.Target), string(aux.Merge)
	return nil
}

func (p provenItem) MarshalJSON() ([]byte, error) {
	type plain provenItem
	return json.Marshal(struct {
		plain
		Path jsonBytes `json:"p"`
	}{plain(p), jsonBytes(p.Path)})
}

func (p *provenItem) UnmarshalJSON(data []byte) error {
	type plain provenItem
	aux := struct {
		*plain
		Path jsonBytes `json:"p"`
	}{plain: (*plain)(p)}
	if err := json.Unmarshal(data, &aux); err != nil {
		return err
	}
	p.Path = string(aux.Path)
	return nil
}

func (d discardItem) MarshalJSON() ([]byte, error) {
	type plain discardItem
	return json.Marshal(struct {
		plain
		Path jsonBytes `json:"p"`
	}{plain(d), jsonBytes(d.Path)})
}

func (d *discardItem) UnmarshalJSON(data []byte) error {
	type plain discardItem
	aux := struct {
		*plain
		Path jsonBytes `json:"p"`
	}{plain: (*plain)(d)}
	if err := json.Unmarshal(data, &aux); err != nil {
		return err
	}
	d.Path = string(aux.Path)
	return nil
}
