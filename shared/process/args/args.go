// Package args parses a command's flags the way every netdra binary does.
// It links the standard library alone, so that netdra-hook, which must
// start fast, uses it as the node processes do (through package process).
package args

import (
	"errors"
	"flag"
	"fmt"
	"io"
)

// Parse parses args into fs, which writes its errors and usage to stderr,
// and refuses arguments left over. ok says the command goes on; otherwise
// code is its exit code: 0 after -help, 2 for bad flags or arguments.
func Parse(fs *flag.FlagSet, args []string, stderr io.Writer) (code int, ok bool) {
	fs.SetOutput(stderr)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0, false
		}
		return 2, false
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "unexpected arguments: %q\n", fs.Args())
		return 2, false
	}
	return 0, true
}
