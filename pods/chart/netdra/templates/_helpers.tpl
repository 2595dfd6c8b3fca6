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

{{/* netdra.metricsArg: the -metrics-address flag of dra or nri, when not the default. */}}
{{- define "netdra.metricsArg" -}}
{{- if not .root.Values.metrics.enabled }}
- -metrics-address=
{{- else if .address }}
- -metrics-address={{ .address }}
{{- end }}
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
