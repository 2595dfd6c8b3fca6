package scale

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"k8s.io/client-go/kubernetes"
)

// sample is one scrape of the apiserver's /metrics: every series by its
// name and labels.
type sample []series

type series struct {
	name   string
	labels map[string]string
	value  float64
}

// scrape reads the apiserver's /metrics (the control plane's process
// registry: the scheduler's and controller-manager's metrics are in it too).
// An apiserver short of CPU can take long to answer: each of three tries
// gets a minute.
func scrape(ctx context.Context, c kubernetes.Interface) (sample, error) {
	var raw []byte
	var err error
	for try := 0; try < 3; try++ {
		tctx, cancel := context.WithTimeout(ctx, time.Minute)
		raw, err = c.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(tctx)
		cancel()
		if err == nil || ctx.Err() != nil {
			break
		}
	}
	if err != nil {
		return nil, fmt.Errorf("reading the apiserver's metrics: %w", err)
	}
	return parseSample(raw), nil
}

// parseSample parses a Prometheus text exposition.
func parseSample(raw []byte) sample {
	var s sample
	sc := bufio.NewScanner(strings.NewReader(string(raw)))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if sr, ok := parseLine(sc.Text()); ok {
			s = append(s, sr)
		}
	}
	return s
}

// parseLine parses `name{k="v",...} value` (or `name value`).
func parseLine(line string) (series, bool) {
	if line == "" || line[0] == '#' {
		return series{}, false
	}
	sr := series{labels: map[string]string{}}
	rest := line
	if i := strings.IndexByte(line, '{'); i >= 0 {
		sr.name = line[:i]
		rest = line[i+1:]
		for len(rest) > 0 && rest[0] != '}' {
			eq := strings.IndexByte(rest, '=')
			if eq < 0 || eq+1 >= len(rest) || rest[eq+1] != '"' {
				return series{}, false
			}
			key := rest[:eq]
			j := eq + 2
			var val strings.Builder
			for ; j < len(rest) && rest[j] != '"'; j++ {
				if rest[j] == '\\' && j+1 < len(rest) {
					j++
				}
				val.WriteByte(rest[j])
			}
			if j >= len(rest) {
				return series{}, false
			}
			sr.labels[key] = val.String()
			rest = strings.TrimPrefix(rest[j+1:], ",")
		}
		if len(rest) == 0 {
			return series{}, false
		}
		rest = strings.TrimSpace(rest[1:])
	} else {
		f := strings.Fields(line)
		if len(f) < 2 {
			return series{}, false
		}
		sr.name, rest = f[0], f[1]
	}
	if f := strings.Fields(rest); len(f) > 0 {
		v, err := strconv.ParseFloat(f[0], 64)
		if err != nil {
			return series{}, false
		}
		sr.value = v
		return sr, true
	}
	return series{}, false
}

// sum adds the values of name's series, grouped by key(labels); a key ""
// drops the series.
func (s sample) sum(name string, key func(map[string]string) string) map[string]float64 {
	out := map[string]float64{}
	for _, sr := range s {
		if sr.name != name {
			continue
		}
		if k := key(sr.labels); k != "" {
			out[k] += sr.value
		}
	}
	return out
}

// resourceOf is resource or resource/subresource.
func resourceOf(l map[string]string) string {
	r := l["resource"]
	if r == "" {
		r = "(none)"
	}
	if sub := l["subresource"]; sub != "" {
		r += "/" + sub
	}
	return r
}

// readVerbs are the request verbs that write nothing.
var readVerbs = map[string]bool{"GET": true, "LIST": true, "WATCH": true, "WATCHLIST": true, "CONNECT": true}

// writes are apiserver_request_total's write requests by "resource VERB".
func (s sample) writes() map[string]float64 {
	return s.sum("apiserver_request_total", func(l map[string]string) string {
		if readVerbs[l["verb"]] {
			return ""
		}
		return resourceOf(l) + " " + l["verb"]
	})
}

// requests are apiserver_request_total's requests by "resource VERB".
func (s sample) requests() map[string]float64 {
	return s.sum("apiserver_request_total", func(l map[string]string) string { return resourceOf(l) + " " + l["verb"] })
}

// watches are the open watches by resource.
func (s sample) watches() map[string]float64 {
	return s.sum("apiserver_longrunning_requests", func(l map[string]string) string {
		if l["verb"] != "WATCH" && l["verb"] != "WATCHLIST" {
			return ""
		}
		return resourceOf(l)
	})
}

// sliceWrites are the ResourceSlice creates and deletes the apiserver
// served (POST and DELETE), the seconds they took in all
// (apiserver_request_duration_seconds) and the seconds its etcd requests
// for ResourceSlices took in all (etcd_request_duration_seconds, lists
// left out).
func (s sample) sliceWrites() (n, total, etcd float64) {
	write := func(l map[string]string) string {
		if l["resource"] == "resourceslices" && l["subresource"] == "" && (l["verb"] == "POST" || l["verb"] == "DELETE") {
			return "x"
		}
		return ""
	}
	n = s.sum("apiserver_request_duration_seconds_count", write)["x"]
	total = s.sum("apiserver_request_duration_seconds_sum", write)["x"]
	etcd = s.sum("etcd_request_duration_seconds_sum", func(l map[string]string) string {
		if l["resource"] == "resourceslices" && l["operation"] != "listWithCount" {
			return "x"
		}
		return ""
	})["x"]
	return n, total, etcd
}

// has reports whether s holds a series of name.
func (s sample) has(name string) bool {
	for _, sr := range s {
		if sr.name == name {
			return true
		}
	}
	return false
}

// one is the sum of name's series.
func (s sample) one(name string) float64 {
	return s.sum(name, func(map[string]string) string { return "x" })["x"]
}

// objects are apiserver_storage_objects by resource.
func (s sample) objects() map[string]float64 {
	out := s.sum("apiserver_storage_objects", func(l map[string]string) string { return l["resource"] })
	for k, v := range s.sum("apiserver_resource_objects", func(l map[string]string) string { return l["resource"] }) {
		out[k] = v
	}
	return out
}

// diff is b - a, key by key, leaving out zeros.
func diff(a, b map[string]float64) map[string]float64 {
	out := map[string]float64{}
	for k, v := range b {
		if d := v - a[k]; d != 0 {
			out[k] = d
		}
	}
	for k, v := range a {
		if _, ok := b[k]; !ok && v != 0 {
			out[k] = -v
		}
	}
	return out
}

// proc is a process's CPU time and memory from /proc.
type proc struct {
	cpu      time.Duration // user + system
	rss, hwm float64       // MiB
}

func readProc(pid int) (proc, error) {
	var p proc
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return p, err
	}
	// The fields after the command's closing parenthesis; utime and
	// stime are the 14th and 15th of the line.
	s := string(stat)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	if len(f) < 13 {
		return p, fmt.Errorf("/proc/%d/stat: %q", pid, s)
	}
	ut, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	p.cpu = time.Duration((ut + st) / clockTicks * float64(time.Second))
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return p, err
	}
	for _, line := range strings.Split(string(status), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		kb, _ := strconv.ParseFloat(f[1], 64)
		switch f[0] {
		case "VmRSS:":
			p.rss = kb / 1024
		case "VmHWM:":
			p.hwm = kb / 1024
		}
	}
	return p, nil
}

// clockTicks is USER_HZ, the unit of /proc/<pid>/stat's times on Linux.
const clockTicks = 100

// loadAvg is /proc/loadavg's first figure.
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	return strings.Fields(string(b))[0]
}
