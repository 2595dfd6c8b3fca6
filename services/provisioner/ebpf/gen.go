package ebpf

// The programs are compiled by `make generate` (clang from Debian's
// packages) and the object and Go code bpf2go writes are committed, so a
// build needs no clang. -fdebug-prefix-map keeps the checkout's path out
// of the object, so it is the same bytes wherever it is regenerated.
//go:generate go tool bpf2go -cc clang-14 -strip llvm-strip-14 -target bpfel -type stat_value -type policy -go-package ebpf netdra bpf/netdra.c -- -O2 -g -Wall -Werror -I/usr/include/x86_64-linux-gnu -fdebug-prefix-map=${PWD}=.
