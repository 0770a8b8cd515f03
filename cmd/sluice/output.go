package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
)

// outputFlag registers --output on fs for an operator command that prints
// an admin API answer: "table" (the default, for people) or "json" (the
// answer exactly as the server sent it, for scripts). Register it once per
// FlagSet: adminClient.flags does not.
func outputFlag(fs *flag.FlagSet) *string {
	return fs.String("output", "table", "table or json (json: the admin API's answer as it came)")
}

// checkOutput returns a usage error naming --output unless output is table
// or json; commands call it before sending anything.
func checkOutput(what, output string) error {
	if output != "table" && output != "json" {
		return fmt.Errorf("%s: --output %q: want table or json: %w", what, output, errUsage)
	}
	return nil
}

// printAnswer prints an admin API answer as --output asks: json writes it
// unchanged; table decodes it into T and calls table. what names the
// command in errors.
func printAnswer[T any](w io.Writer, what, output string, answer []byte, table func(io.Writer, T) error) error {
	if err := checkOutput(what, output); err != nil {
		return err
	}
	if output == "json" {
		_, err := w.Write(answer)
		return err
	}
	var v T
	if err := json.Unmarshal(answer, &v); err != nil {
		return fmt.Errorf("%s: the answer is not what this version expects: %w", what, err)
	}
	return table(w, v)
}

// flagSetMade, when set (by tests), is called with every FlagSet a command
// makes; the help test uses it to know each command's flags.
var flagSetMade func(*flag.FlagSet)

// newFlagSet makes a command's FlagSet: errors returned, not fatal, and
// messages and help written to stderr.
func newFlagSet(name string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	if flagSetMade != nil {
		flagSetMade(fs)
	}
	return fs
}

// splitAction takes the action word of an operator command (sluice NAME
// ACTION [flags]). With no word, or with -h, it prints usage to stderr and
// returns ok false: with no word, err is a usage error; with -h, nil.
func splitAction(name string, args []string, stderr io.Writer, usage func(io.Writer)) (action string, ok bool, err error) {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "-help" {
		usage(stderr)
		if len(args) == 0 {
			return "", false, fmt.Errorf("%s: no action given: %w", name, errUsage)
		}
		return "", false, nil
	}
	return args[0], true, nil
}
