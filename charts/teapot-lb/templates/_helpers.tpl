{{/* Common labels. */}}
{{- define "teapot.labels" -}}
app.kubernetes.io/name: teapot
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end }}

{{- define "teapot.selector" -}}
app.kubernetes.io/name: teapot
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{- define "teapot.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end }}

{{- define "teapot.domain" -}}
{{- required "domain is required: tenants get INGRESS.CLUSTER.lb.DOMAIN" .Values.domain -}}
{{- end }}

{{/* A tenant's namespace: spec.namespace, default tenant-<cluster>. */}}
{{- define "teapot.tenantNamespace" -}}
{{- .namespace | default (printf "tenant-%s" .cluster) -}}
{{- end }}

{{/* Every namespace proxy and webhook read (rbac.clusterWide=false), as a JSON list. */}}
{{- define "teapot.watchNamespaces" -}}
{{- $list := list .Release.Namespace -}}
{{- range .Values.operatorNamespaces }}{{ $list = append $list . }}{{ end -}}
{{- range .Values.tenants }}{{ $list = append $list (include "teapot.tenantNamespace" .) }}{{ end -}}
{{- $list | uniq | toJson -}}
{{- end }}

{{/* --kube-namespace flags (none with rbac.clusterWide). */}}
{{- define "teapot.kubeNamespaceArgs" -}}
{{- if not .Values.rbac.clusterWide }}
{{- range (include "teapot.watchNamespaces" . | fromJsonArray) }}
- --kube-namespace={{ . }}
{{- end }}
{{- end }}
{{- end }}

{{- define "teapot.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
fsGroup: 65532
seccompProfile:
  type: RuntimeDefault
{{- end }}

{{- define "teapot.containerSecurityContext" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
capabilities:
  drop: [ALL]
{{- end }}

{{- /* Where announce.bgp.peers[INDEX].passwordSecret is mounted. */}}
{{- define "teapot.bgpPasswordDir" -}}
/etc/teapot/bgp-peers/{{ . }}
{{- end }}

{{- /* One --bgp-peer spec (docs/announce.md, "Peer settings"):
       ADDR,ASN[,key=value...] from announce.bgp.peers[INDEX]. hold and
       local-pref may be 0, so they go by presence, not truth. Numbers go
       through int64: helm reads YAML numbers as floats, and a 32-bit ASN
       would print in exponent form. */}}
{{- define "teapot.bgpPeer" -}}
{{- $p := .peer -}}
{{ $p.address }},{{ int64 $p.asn }}
{{- with $p.port }},port={{ int64 . }}{{ end }}
{{- if hasKey $p "hold" }},hold={{ int64 $p.hold }}{{ end }}
{{- with $p.keepalive }},keepalive={{ int64 . }}{{ end }}
{{- with $p.multihop }},multihop={{ int64 . }}{{ end }}
{{- with $p.source }},source={{ . }}{{ end }}
{{- with $p.nextHop }},next-hop={{ . }}{{ end }}
{{- if hasKey $p "localPref" }},local-pref={{ int64 $p.localPref }}{{ end }}
{{- with $p.bfd }},bfd={{ . }}{{ end }}
{{- if $p.passive }},passive=true{{ end }}
{{- if $p.passwordSecret }},password-file={{ include "teapot.bgpPasswordDir" .index }}/password{{ end }}
{{- end }}
