{{/* The labels every object carries. */}}
{{- define "netdra.labels" -}}
app.kubernetes.io/part-of: netdra
{{- end }}

{{/*
netdra.image: the image of a service, <registry>/<service>:<tag>, with
@<digest> when one is set. images.<service> replaces image.registry and
image.tag; the tag defaults to the chart's appVersion.
*/}}
{{- define "netdra.image" -}}
{{- $img := index .root.Values.images .service | default dict -}}
{{- $registry := $img.registry | default .root.Values.image.registry -}}
{{- $tag := $img.tag | default .root.Values.image.tag | default .root.Chart.AppVersion -}}
{{ $registry }}/{{ .service }}:{{ $tag }}{{ with $img.digest }}@{{ . }}{{ end }}
{{- end }}

{{/* netdra.imageFields: a container's image and imagePullPolicy lines. */}}
{{- define "netdra.imageFields" -}}
image: {{ include "netdra.image" . }}
{{- with .root.Values.image.pullPolicy }}
imagePullPolicy: {{ . }}
{{- end }}
{{- end }}

{{/*
netdra.metricsArg: the -metrics-address flag of a process (name: dra, nri,
state, provisioner): none served when metrics are off; else its address
value, or 127.0.0.1 (loopback) or the pod's IP ($(POD_IP), the node's on
the host network) with its port.
*/}}
{{- define "netdra.metricsArg" -}}
{{- $m := .root.Values.metrics -}}
{{- $addr := index $m (printf "%sAddress" .name) -}}
{{- if not $m.enabled }}
- -metrics-address=
{{- else if $addr }}
- -metrics-address={{ $addr }}
{{- else if $m.loopback }}
- -metrics-address=127.0.0.1:{{ index $m.ports .name }}
{{- else }}
- -metrics-address=$(POD_IP):{{ index $m.ports .name }}
{{- end }}
{{- end }}

{{/*
netdra.metricsPortNumber: a process's metrics port: the port of its
address value, else of metrics.ports. The containers declare no ports: on
the host network a declared port is a host port, which would keep a
roll's next node pod (maxSurge) off the node while the previous one runs.
*/}}
{{- define "netdra.metricsPortNumber" -}}
{{- $m := .root.Values.metrics -}}
{{- $addr := index $m (printf "%sAddress" .name) -}}
{{- if $addr }}{{ splitList ":" $addr | last }}{{ else }}{{ index $m.ports .name }}{{ end -}}
{{- end }}

{{/* netdra.podIPEnv: the POD_IP variable the metrics address may name. */}}
{{- define "netdra.podIPEnv" -}}
- name: POD_IP
  valueFrom:
    fieldRef:
      fieldPath: status.podIP
{{- end }}

{{/*
netdra.extraArgs: the log level and a container's extra arguments, as
lines of its args list (nothing when neither is set).
*/}}
{{- define "netdra.extraArgs" -}}
{{- with .root.Values.logLevel }}
- -log-level={{ . }}
{{- end }}
{{- range .args }}
- {{ . | quote }}
{{- end }}
{{- end }}

{{/* netdra.pullSecrets: a pod spec's imagePullSecrets, when any. */}}
{{- define "netdra.pullSecrets" -}}
{{- with .Values.image.pullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}
