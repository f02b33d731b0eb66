{{/* Chart name, overridable. */}}
{{- define "vks.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Full object name: the release name, or release-chart when it does not contain the chart name. */}}
{{- define "vks.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* Labels on every object. */}}
{{- define "vks.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/part-of: vllm-keda-scaler
{{- end -}}

{{/* The scaler pods' selector. */}}
{{- define "vks.selectorLabels" -}}
app.kubernetes.io/name: {{ include "vks.name" . }}
app.kubernetes.io/component: scaler
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "vks.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "vks.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "vks.tlsSecretName" -}}
{{- default (printf "%s-server-tls" (include "vks.fullname" .)) .Values.tls.secretName -}}
{{- end -}}

{{- define "vks.clientSecretName" -}}
{{- default (printf "%s-client-tls" (include "vks.fullname" .)) .Values.tls.clientSecretName -}}
{{- end -}}

{{/* The host KEDA dials: the headless gRPC Service (the server certificate must name it). */}}
{{- define "vks.grpcHost" -}}
{{- printf "%s.%s.svc.cluster.local" (include "vks.fullname" .) .Release.Namespace -}}
{{- end -}}

{{/* Distinct namespaces of the models, sorted. */}}
{{- define "vks.modelNamespaces" -}}
{{- $seen := dict -}}
{{- range .Values.models -}}
{{- $_ := set $seen .namespace "" -}}
{{- end -}}
{{- keys $seen | sortAlpha | toJson -}}
{{- end -}}
