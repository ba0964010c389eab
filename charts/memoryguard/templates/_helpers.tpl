{{- define "memoryguard.name" -}}memoryguard{{- end -}}

{{- define "memoryguard.fullname" -}}
{{- if contains "memoryguard" .Release.Name -}}{{ .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else -}}{{ printf "%s-memoryguard" .Release.Name | trunc 63 | trimSuffix "-" }}{{- end -}}
{{- end -}}

{{- define "memoryguard.labels" -}}
app.kubernetes.io/name: memoryguard
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "memoryguard.selector" -}}
app.kubernetes.io/name: memoryguard
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: operator
{{- end -}}

{{- define "memoryguard.image" -}}
{{- if .digest -}}{{ .repository }}@{{ .digest }}{{- else -}}{{ .repository }}:{{ .tag | default .appVersion }}{{- end -}}
{{- end -}}

{{- /* Where the sidecars' NetworkPolicy goes: where the Ray pods run. Never
the release namespace by default (no Ray pod runs there); with neither list
set there is no policy, and NOTES.txt says so loudly. */ -}}
{{- define "memoryguard.policyNamespaces" -}}
{{- if not .Values.networkPolicy.enabled -}}[]
{{- else if .Values.networkPolicy.namespaces -}}{{ toJson .Values.networkPolicy.namespaces }}
{{- else if .Values.watchNamespaces -}}{{ toJson .Values.watchNamespaces }}
{{- else -}}[]{{- end -}}
{{- end -}}

{{- /* The operator's ServiceAccount: the release's full name unless named. */ -}}
{{- define "memoryguard.serviceAccountName" -}}
{{- .Values.serviceAccount.name | default (include "memoryguard.fullname" .) -}}
{{- end -}}
