package sandboxfs

// request is one operation, as sent to the server (one JSON line).
type request struct {
	ID      int64  `json:"id"`
	Op      string `json:"op"` // read, write, edit, search
	Path    string `json:"path"`
	Offset  int    `json:"offset,omitempty"`
	Limit   int    `json:"limit,omitempty"`
	Content string `json:"content,omitempty"`
	Old     string `json:"old,omitempty"`
	New     string `json:"new,omitempty"`
	All     bool   `json:"all,omitempty"`
	Pattern string `json:"pattern,omitempty"`
	Glob    string `json:"glob,omitempty"`
	Mode    string `json:"mode,omitempty"`
}

// response is the server's answer (one JSON line).
type response struct {
	ID    int64         `json:"id"`
	Error *Error        `json:"error,omitempty"`
	Read  *ReadResult   `json:"read,omitempty"`
	Write *WriteResult  `json:"write,omitempty"`
	Edit  *EditResult   `json:"edit,omitempty"`
	Find  *SearchResult `json:"search,omitempty"`
}

// Error kinds.
const (
	ErrNotFound   = "not_found"
	ErrIsDir      = "is_directory"
	ErrReadOnly   = "read_only"
	ErrOutside    = "outside_writable"
	ErrProtected  = "protected"
	ErrPermission = "permission_denied"
	ErrTooLarge   = "too_large"
	ErrBadRequest = "bad_request"
	ErrNoMatch    = "no_match"
	ErrAmbiguous  = "ambiguous"
	ErrBinary     = "binary"
	ErrInternal   = "internal"
)

// Error is a failed file operation, with a message a model can act on.
type Error struct {
	// Kind is one of the Err* constants.
	Kind string `json:"kind"`
	// Message says what happened and what to do.
	Message string `json:"message"`
}

// Error implements error: the message.
func (e *Error) Error() string { return e.Message }

// ReadResult is what read_file returns.
type ReadResult struct {
	// Path is the file read (absolute, as the sandbox sees it).
	Path string `json:"path"`
	// Content is the requested lines, each prefixed with its number and a
	// tab (cat -n style). Empty for a binary file.
	Content string `json:"content"`
	// StartLine is the number of the first line shown (1-based); Lines is
	// how many are shown; TotalLines how many the file has.
	StartLine  int `json:"start_line"`
	Lines      int `json:"lines"`
	TotalLines int `json:"total_lines"`
	// Size is the file's size in bytes.
	Size int64 `json:"size"`
	// Truncated is set when more lines follow, or lines or the output were
	// cut to the caps; Binary when the file holds NUL bytes (not shown);
	// InvalidUTF8 when bytes were replaced with U+FFFD.
	Truncated   bool `json:"truncated,omitempty"`
	Binary      bool `json:"binary,omitempty"`
	InvalidUTF8 bool `json:"invalid_utf8,omitempty"`
}

// WriteResult is what write_file returns.
type WriteResult struct {
	// Path is the file written (its real path, symlinks resolved).
	Path string `json:"path"`
	// Bytes is the size written; Created is set when the file is new.
	Bytes   int  `json:"bytes"`
	Created bool `json:"created"`
}

// EditResult is what edit_file returns.
type EditResult struct {
	// Path is the file edited (its real path).
	Path string `json:"path"`
	// Replacements is how many occurrences were replaced.
	Replacements int `json:"replacements"`
	// Diff is a short unified diff of the change.
	Diff string `json:"diff"`
}

// SearchResult is what search_files returns.
type SearchResult struct {
	// Matches are "path:line:text" lines (mode content) or paths (mode
	// files), at most the cap.
	Matches []string `json:"matches"`
	// Truncated is set when more results were left out; Tool names the
	// program that searched (rg, grep, find).
	Truncated bool   `json:"truncated,omitempty"`
	Tool      string `json:"tool"`
	// TimedOut is set when the search was stopped at its time limit
	// (searchTimeout, 30 s): Matches are what it found until then, and a
	// match may lie in what it had not read.
	TimedOut bool `json:"timed_out,omitempty"`
	// Unreadable is set when some files or directories could not be
	// read (permission denied, gone while searched): they were skipped.
	Unreadable bool `json:"unreadable,omitempty"`
}
