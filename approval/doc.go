// Package approval decides, before a shell command line runs, whether it
// may run at once, needs a person's approval first, or is refused.
//
// # Approval is not the sandbox
//
// The sandbox (package sandbox and its backends) is corral's security
// boundary: whatever a command does, it cannot write outside the writable
// set, read hidden credentials, reach a network its profile has not got or
// outgrow its limits. Approval neither widens nor narrows that. It is a
// courtesy against accidents inside the boundary: an agent that
// force-pushes, resets a branch or deletes a build tree does real damage to
// the files the sandbox lets it write, and a person may want to see such
// commands before they run. Approval reads the command line as text; it
// cannot see what a script file, a variable, an alias or a program the
// command starts will do, so it is easy to get around on purpose
// (`sh script.sh`, `$RM -rf /`, `python -c ...`). It is not a security
// control, and nothing may rely on it to keep a command from running.
//
// # Verdicts
//
// [Check] returns a [Decision] with one of three verdicts:
//
//   - [Deny]: the command line is on the hard floor, refused whatever the
//     settings.
//   - [Ask]: under [ModeAsk], the command line matches one of the policy's
//     patterns; a person must approve it before it runs (the MCP server
//     asks through elicitation when the client supports it and refuses
//     otherwise).
//   - [Allow]: anything else, and every pattern match under [ModeOff].
//
// # The hard floor
//
// These are refused whatever the policy says (rule names in brackets):
//
//   - recursive rm of the root directory [rm-root]: rm -rf /, rm -fr /,
//     rm -r -f /, rm --recursive --force /, rm -rf /*, rm -rf
//     --no-preserve-root /, rm -r //, rm -rf /.. and so on;
//   - recursive chmod, chown or chgrp of the root directory [chmod-root];
//   - mkfs (mkfs, mkfs.*, mke2fs, mkswap, mkdosfs, wipefs, blkdiscard) onto
//     a device under /dev or onto a target given by a variable [mkfs];
//   - writes onto a block device [block-device]: dd of=/dev/sda (also nvme,
//     vd, xvd, mmcblk, loop, md, dm-, /dev/disk/..., /dev/mapper/...), a
//     redirection such as > /dev/sda, tee /dev/sda; /dev/null, /dev/zero,
//     /dev/stdout, /dev/tty*, /dev/pts/*, /dev/fd/* and the like are fine;
//   - fork bombs [fork-bomb]: a shell function that pipes itself into
//     itself or starts itself in the background more than once (:(){ :|:&
//     };: and renamed variants), and perl's fork while fork and python's
//     while True: os.fork();
//   - shutting the machine down [shutdown]: shutdown, reboot, halt,
//     poweroff, init 0 and 6, telinit 0 and 6, systemctl poweroff, reboot,
//     halt, kexec and soft-reboot, and writes to /proc/sysrq-trigger.
//
// The command line is parsed as bash (mvdan.cc/sh/v3/syntax), so quoting
// and words inside strings are understood: echo 'rm -rf /' and grep reboot
// log.txt run, while "rm" -rf '/', \rm -rf / and rm -rf /{,} (braces are
// expanded as bash does) do not. Words holding variables or command
// substitutions are unknown, so rm -rf "$DIR/" is no floor violation (the
// default patterns ask about it). Commands are found
// after ; && || | and &, in subshells, $(...), `...`, <(...), functions,
// if/for/while bodies, behind wrappers (sudo, doas, env, command, builtin,
// exec, nice, nohup, setsid, timeout, stdbuf, ionice, chrt, taskset, time,
// xargs, busybox, fakeroot, ...), and in scripts handed to another shell:
// bash -c '...', sh -c, su -c, eval, env -S, watch, ssh HOST '...', a here
// document or here string fed to a shell, and echo '...' | sh. A command
// line that does not parse is matched conservatively instead: quotes are
// dropped and every word may start a command, so echo 'rm -rf / (with its
// quote unclosed) is refused.
//
// # Patterns
//
// A policy's patterns (the approval_patterns setting, [DefaultPatterns]
// when it is empty) are written in one of two forms:
//
//   - re:REGEXP, a Go regular expression (RE2 syntax) searched for in the
//     whole command line as written: "re:(?i)\bdrop\s+table\b".
//   - A command as it is written in the shell: "git reset --hard". The
//     first word is a glob matched against the program's name without its
//     directory, after wrappers such as sudo are removed. Every further word
//     must appear among the command's arguments: an option --name matches
//     --name, --name=value and abbreviations such as --na; a short option
//     -x or a cluster -xy matches when each letter appears among the
//     command's short options however they are grouped (-rf matches -fr,
//     -r -f and -vfr; letters are case-sensitive); any other word is a glob
//     that must match a whole argument, those words in the order given.
//     Globs have * (any run of characters, also /), ? and [a-z]; {a,b,c}
//     gives alternatives for a word ("rm {-r,-R,--recursive}"). "A | B"
//     matches a pipeline in which a command matching A is followed, at once
//     or later, by one matching B ("curl | sh"). Variables and other
//     expansions are not allowed in patterns.
//
// Patterns hold no ; && || or redirections: one command or one pipeline
// each. Because a pattern list from the environment or `corral config set`
// may be written comma-separated, a pattern that holds {a,b} must be given
// as a JSON or YAML list there (["rm {-r,-R}"]).
package approval
