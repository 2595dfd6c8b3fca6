// Package tiltcheck holds CI's check of the Tiltfile: no Tilt binary exists
// where CI runs, so the test evaluates the Tiltfile as Starlark
// (go.starlark.net) with Tilt's built-ins and the extensions it loads
// replaced by stubs that check their arguments (Tilt's parameter names,
// paths that exist, make targets that exist) and record the calls; any
// evaluation error fails the test, which then asserts what the Tiltfile
// declares against pods/ and the Makefile.
package tiltcheck
