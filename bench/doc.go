// Package bench holds netdra's benchmarks. Each one measures a path of the
// product against a baseline measured in the same run (the machines are
// noisy), and reports the ratio: `make bench` runs them all.
package bench
