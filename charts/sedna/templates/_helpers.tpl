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

{{/*
A pod's extra annotations (YAML, "" when none): its podAnnotations value, and prometheus.io/*
for a Prometheus that finds its targets by pod annotation, when metrics.scrapeAnnotations is on
and no ServiceMonitor/PodMonitor does the finding (a key in podAnnotations wins). Arguments:
the values, the podAnnotations, the pod's metrics port, whether it serves https.
*/}}
{{- define "sedna.podAnnotations" -}}
{{- $values := index . 0 -}}
{{- $scrape := dict -}}
{{- if and $values.metrics.scrapeAnnotations (not $values.serviceMonitor.enabled) -}}
{{- $scrape = dict "prometheus.io/scrape" "true" "prometheus.io/port" (index . 2 | toString) "prometheus.io/path" "/metrics" -}}
{{- if index . 3 -}}
{{- $_ := set $scrape "prometheus.io/scheme" "https" -}}
{{- end -}}
{{- end -}}
{{- $all := merge (dict) (index . 1 | default dict) $scrape -}}
{{- if $all -}}
{{- toYaml $all -}}
{{- end -}}
{{- end -}}
