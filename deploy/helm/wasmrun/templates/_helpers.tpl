{{- define "wasmrun.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "wasmrun.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else if contains (include "wasmrun.name" .) .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name (include "wasmrun.name" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "wasmrun.selectorLabels" -}}
app.kubernetes.io/name: {{ include "wasmrun.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "wasmrun.labels" -}}
{{ include "wasmrun.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "wasmrun.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{/* The Secret holding a value: the operator's existing one, else the chart's. */}}
{{- define "wasmrun.databaseSecret" -}}
{{- default (printf "%s-database" (include "wasmrun.fullname" .)) .Values.database.existingSecret -}}
{{- end -}}
{{- define "wasmrun.storeSecret" -}}
{{- default (printf "%s-store" (include "wasmrun.fullname" .)) .Values.store.existingSecret -}}
{{- end -}}
{{- define "wasmrun.metricsSecret" -}}
{{- default (printf "%s-metrics" (include "wasmrun.fullname" .)) .Values.metrics.existingSecret -}}
{{- end -}}
{{- define "wasmrun.skillSecrets" -}}
{{- default (printf "%s-skill-secrets" (include "wasmrun.fullname" .)) .Values.skillSecrets.existingSecret -}}
{{- end -}}

{{/* Security settings shared by the server, its init container and the migration Job. */}}
{{- define "wasmrun.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: {{ .Values.securityContext.runAsUser }}
runAsGroup: {{ .Values.securityContext.runAsUser }}
fsGroup: {{ .Values.securityContext.runAsUser }}
seccompProfile:
  type: RuntimeDefault
{{- end -}}
{{- define "wasmrun.containerSecurityContext" -}}
runAsNonRoot: true
runAsUser: {{ .Values.securityContext.runAsUser }}
runAsGroup: {{ .Values.securityContext.runAsUser }}
privileged: false
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
capabilities:
  drop: ["ALL"]
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{/* The settings every wasmrun process of the release reads (wasmrun/settings.py). */}}
{{- define "wasmrun.backendEnv" -}}
- name: WASMRUN_DATABASE_URL
  valueFrom:
    secretKeyRef:
      name: {{ include "wasmrun.databaseSecret" . }}
      key: {{ .Values.database.secretKey }}
{{- if .Values.store.url }}
- name: WASMRUN_BLOB_STORE
  value: {{ .Values.store.url | quote }}
- name: AWS_ACCESS_KEY_ID
  valueFrom:
    secretKeyRef:
      name: {{ include "wasmrun.storeSecret" . }}
      key: access-key-id
- name: AWS_SECRET_ACCESS_KEY
  valueFrom:
    secretKeyRef:
      name: {{ include "wasmrun.storeSecret" . }}
      key: secret-access-key
{{- end }}
- name: WASMRUN_DATA_DIR
  value: /data
- name: WASMRUN_CACHE_DIR
  value: {{ .Values.cache.path }}
- name: HOME
  value: /tmp
{{- end -}}

{{- define "wasmrun.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "wasmrun.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "wasmrun.healthz" -}}
path: /healthz
port: http
httpHeaders:
  - name: Host
    value: localhost
{{- end -}}
