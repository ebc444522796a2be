{{- define "agent.labels" -}}
app.kubernetes.io/name: teapot-agent
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end }}
{{- define "agent.selector" -}}
app.kubernetes.io/name: teapot-agent
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}
