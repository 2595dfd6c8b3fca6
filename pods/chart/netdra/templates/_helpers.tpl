{{/* The labels every object carries (pods/base's kustomization adds the same). */}}
{{- define "netdra.labels" -}}
app.kubernetes.io/part-of: netdra
{{- end }}

{{/* netdra.image: the image of a service, "<prefix>/<service>:<tag>". */}}
{{- define "netdra.image" -}}
{{ .root.Values.image.prefix }}/{{ .service }}:{{ .root.Values.image.tag }}
{{- end }}

{{/* netdra.metricsArg: the -metrics-address flag of dra or nri, when not the default. */}}
{{- define "netdra.metricsArg" -}}
{{- if not .root.Values.metrics.enabled }}
- -metrics-address=
{{- else if .address }}
- -metrics-address={{ .address }}
{{- end }}
{{- end }}
