{{/* Names and labels shared by every object of the chart. */}}
{{- define "sluice.name" -}}
{{- .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "sluice.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "sluice.selectorLabels" -}}
app.kubernetes.io/name: {{ include "sluice.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "sluice.labels" -}}
{{ include "sluice.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{- define "sluice.secretName" -}}
{{- default (include "sluice.fullname" .) .Values.secrets.existingSecret -}}
{{- end -}}

{{- define "sluice.rulesConfigMap" -}}
{{- default (printf "%s-rules" (include "sluice.fullname" .)) .Values.rules.existingConfigMap -}}
{{- end -}}

{{- define "sluice.validate" -}}
{{- if not (has .Values.store (list "memory" "redis")) -}}
{{- fail (printf "store: %q is not memory or redis" .Values.store) -}}
{{- end -}}
{{- if not (has .Values.defaultFailureMode (list "open" "closed" "local")) -}}
{{- fail (printf "defaultFailureMode: %q is not open, closed or local" .Values.defaultFailureMode) -}}
{{- end -}}
{{- if and (eq .Values.store "redis") (not .Values.secrets.existingSecret) (not .Values.secrets.redisURL) -}}
{{- fail "store redis needs secrets.redisURL or secrets.existingSecret" -}}
{{- end -}}
{{- end -}}
