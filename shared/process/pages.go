package process

import (
	"bufio"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// StartupSettle is how long after it starts serving a process is left to
// finish its start-up (dra's first sync and publication, say) before it
// gives back its start-up pages: what an idle process holds is measured
// after it.
const StartupSettle = 10 * time.Second

// giveBackStartupPages asks the kernel to reclaim the pages of the
// process's own binary it holds mapped read-only (its code and read-only
// data: MADV_PAGEOUT), and returns how much of its resident file memory
// went (RssFile before less after).
//
// Why: at start every package's init runs, code spread all over the
// binary, and the kernel maps the pages around each page touched
// (fault-around), so a Go process holds most of its binary resident,
// though what it runs afterwards touches far less. Given back, those
// pages are unmapped (and leave the page cache, when nothing else maps
// them); what the process runs later faults back in. The kernel pages
// out a file's pages only for a process that owns the file or may write
// it (the images own each binary by its user); for another it does
// nothing, as on kernels without MADV_PAGEOUT.
func giveBackStartupPages() (released int64, err error) {
	before, err := rssFile()
	if err != nil {
		return 0, err
	}
	exe, err := os.Readlink("/proc/self/exe")
	if err != nil {
		return 0, err
	}
	f, err := os.Open("/proc/self/maps")
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// address perms offset dev inode path
		fs := strings.Fields(sc.Text())
		if len(fs) < 6 || fs[5] != exe || strings.ContainsRune(fs[1], 'w') {
			continue
		}
		lo, hi, ok := strings.Cut(fs[0], "-")
		start, err1 := strconv.ParseUint(lo, 16, 64)
		end, err2 := strconv.ParseUint(hi, 16, 64)
		if !ok || err1 != nil || err2 != nil || end <= start {
			return 0, fmt.Errorf("/proc/self/maps: mapping %q", fs[0])
		}
		// The raw call: the range is an address range of the process's
		// own, not memory Go manages.
		if _, _, errno := unix.Syscall(unix.SYS_MADVISE, uintptr(start), uintptr(end-start), unix.MADV_PAGEOUT); errno != 0 {
			return 0, fmt.Errorf("madvise of %s %s: %w", fs[0], exe, errno)
		}
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	after, err := rssFile()
	if err != nil {
		return 0, err
	}
	return before - after, nil
}

// rssFile is the process's resident file memory in bytes, from
// /proc/self/status.
func rssFile() (int64, error) {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, err
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "RssFile:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10, err
		}
	}
	return 0, fmt.Errorf("/proc/self/status: no RssFile")
}

// startupPages is RunServer's actor that gives back the start-up pages
// (giveBackStartupPages) once the process has served for StartupSettle,
// and logs how much went; it does nothing more until interrupted.
func startupPages(log *slog.Logger) Actor {
	stop := make(chan struct{})
	var once sync.Once
	return Actor{
		Execute: func() error {
			t := time.NewTimer(StartupSettle)
			defer t.Stop()
			select {
			case <-stop:
				return nil
			case <-t.C:
			}
			if released, err := giveBackStartupPages(); err != nil {
				log.Debug("Start-up pages not given back", "error", err)
			} else {
				log.Debug("Start-up pages given back", "bytes", released)
			}
			<-stop
			return nil
		},
		Interrupt: func(error) { once.Do(func() { close(stop) }) },
	}
}
