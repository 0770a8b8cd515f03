package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
)

// flagError is a command-line flag the FlagSet refused: its message is one
// line naming the flag, a suggestion when an unknown flag is near a known
// one, and where every flag is listed (as kubectl and gh answer, not the
// whole usage). It is a usage error (exit 2).
type flagError struct{ msg string }

func (e *flagError) Error() string { return e.msg }

// Unwrap makes a flagError a usage error.
func (e *flagError) Unwrap() error { return errUsage }

// parseArgs parses args into fs without the flag package's own answer to a
// bad flag (its message then the whole usage): a bad flag is returned as a
// *flagError; -h/--help prints fs.Usage and returns flag.ErrHelp.
func parseArgs(fs *flag.FlagSet, args []string) error {
	out, usage := fs.Output(), fs.Usage
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	err := fs.Parse(args)
	fs.SetOutput(out)
	fs.Usage = usage
	switch {
	case err == nil:
		return nil
	case errors.Is(err, flag.ErrHelp):
		if usage != nil {
			usage()
		} else {
			fs.PrintDefaults()
		}
		return err
	}
	return newFlagError(fs, err)
}

// newFlagError words err, which fs.Parse returned, as a flagError.
func newFlagError(fs *flag.FlagSet, err error) *flagError {
	help := fmt.Sprintf("run 'sluice %s --help' for every flag", fs.Name())
	const unknown = "flag provided but not defined: -"
	msg := err.Error()
	if name, ok := strings.CutPrefix(msg, unknown); ok {
		var names []string
		fs.VisitAll(func(f *flag.Flag) { names = append(names, f.Name) })
		msg = fmt.Sprintf("%s: unknown flag %s", fs.Name(), dashes(name))
		if s := closest(name, names); s != "" {
			msg += fmt.Sprintf(" (did you mean %s?)", dashes(s))
		}
		return &flagError{msg + "; " + help}
	}
	if name, ok := strings.CutPrefix(msg, "flag needs an argument: -"); ok {
		msg = dashes(name) + " needs a value"
	}
	return &flagError{fmt.Sprintf("%s: %s; %s", fs.Name(), msg, help)}
}

// dashes writes a flag name as the docs do: --name, or -n for one letter.
func dashes(name string) string {
	if len(name) == 1 {
		return "-" + name
	}
	return "--" + name
}
