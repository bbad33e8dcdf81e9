{{/*
The LocalControllers' namespace: lc.namespace, else "<release namespace>-lc". The LC needs the
host network and the host's / (Pod Security level `privileged`), the GM nothing beyond
`restricted`: two namespaces, so each can enforce its own level.
*/}}
{{- define "sedna.lcNamespace" -}}
{{- .Values.lc.namespace | default (printf "%s-lc" .Release.Namespace) -}}
{{- end -}}

{{/* Pod Security Admission labels enforcing, warning and auditing one level. */}}
{{- define "sedna.podSecurityLabels" -}}
{{- $level := index . 0 -}}
{{- $version := index . 1 -}}
pod-security.kubernetes.io/enforce: {{ $level }}
pod-security.kubernetes.io/enforce-version: {{ $version }}
pod-security.kubernetes.io/warn: {{ $level }}
pod-security.kubernetes.io/warn-version: {{ $version }}
pod-security.kubernetes.io/audit: {{ $level }}
pod-security.kubernetes.io/audit-version: {{ $version }}
{{- end -}}
