{{/* Names, labels and the few values every template shares. */}}

{{- define "space.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "space.fullname" -}}
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

{{/* Object names of the components (kept short enough for a StatefulSet's Pod names). */}}
{{- define "space.node.fullname" -}}{{ include "space.fullname" . | trunc 52 | trimSuffix "-" }}-node{{- end -}}
{{- define "space.gateway.fullname" -}}{{ include "space.fullname" . | trunc 49 | trimSuffix "-" }}-gateway{{- end -}}
{{- define "space.etcd.fullname" -}}{{ include "space.fullname" . | trunc 40 | trimSuffix "-" }}-etcd{{- end -}}

{{- define "space.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Labels that select a component's Pods (never change them: selectors are immutable). */}}
{{- define "space.selectorLabels" -}}
app.kubernetes.io/name: {{ include "space.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "space.labels" -}}
{{ include "space.selectorLabels" . }}
helm.sh/chart: {{ include "space.chart" .root }}
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
app.kubernetes.io/part-of: space
{{- if .root.Chart.AppVersion }}
app.kubernetes.io/version: {{ .root.Chart.AppVersion | quote }}
{{- end }}
{{- with .root.Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{- define "space.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "space.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "space.secretName" -}}
{{- if .Values.auth.existingSecret -}}
{{- .Values.auth.existingSecret -}}
{{- else -}}
{{- include "space.fullname" . }}-auth
{{- end -}}
{{- end -}}

{{/* An image reference: repository:tag, or repository:tag@digest. No floating tags. */}}
{{- define "space.imageRef" -}}
{{- $tag := toString (default .default .image.tag) -}}
{{- if or (eq $tag "") (eq $tag "latest") -}}
{{- fail (printf "%s: image tag %q is not pinned; give a version (or leave it empty for the chart's appVersion)" .what $tag) -}}
{{- end -}}
{{- if .image.digest -}}
{{- printf "%s:%s@%s" .image.repository $tag .image.digest -}}
{{- else -}}
{{- printf "%s:%s" .image.repository $tag -}}
{{- end -}}
{{- end -}}

{{- define "space.image" -}}
{{- include "space.imageRef" (dict "image" .Values.image "default" .Chart.AppVersion "what" "image") -}}
{{- end -}}

{{/* The etcd client URLs spaced is given (--etcd), comma-separated. */}}
{{- define "space.etcdEndpoints" -}}
{{- if eq .Values.etcd.mode "external" -}}
{{- if not .Values.etcd.endpoints -}}
{{- fail "etcd.mode=external needs etcd.endpoints (a list of http://HOST:PORT)" -}}
{{- end -}}
{{- join "," .Values.etcd.endpoints -}}
{{- else if eq .Values.etcd.mode "bundled" -}}
{{- $name := include "space.etcd.fullname" . -}}
{{- $urls := list -}}
{{- range $i := until (int .Values.etcd.replicas) -}}
{{- $urls = append $urls (printf "http://%s-%d.%s.%s.svc.%s:%d" $name $i $name $.Release.Namespace $.Values.clusterDomain (int $.Values.etcd.clientPort)) -}}
{{- end -}}
{{- join "," $urls -}}
{{- else -}}
{{- fail (printf "etcd.mode must be bundled or external, not %q" .Values.etcd.mode) -}}
{{- end -}}
{{- end -}}

{{/* Spread Pods of a component over topology domains: soft, hard or none. */}}
{{- define "space.antiAffinity" -}}
{{- if eq .mode "hard" }}
podAntiAffinity:
  requiredDuringSchedulingIgnoredDuringExecution:
    - topologyKey: {{ .topologyKey }}
      labelSelector:
        matchLabels:
          {{- include "space.selectorLabels" . | nindent 10 }}
{{- else if eq .mode "soft" }}
podAntiAffinity:
  preferredDuringSchedulingIgnoredDuringExecution:
    - weight: 100
      podAffinityTerm:
        topologyKey: {{ .topologyKey }}
        labelSelector:
          matchLabels:
            {{- include "space.selectorLabels" . | nindent 12 }}
{{- end }}
{{- end -}}
