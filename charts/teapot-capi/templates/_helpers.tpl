{{- define "capi.labels" -}}
app.kubernetes.io/name: teapot-capi
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end }}
{{- define "capi.selector" -}}
app.kubernetes.io/name: teapot-capi
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}
