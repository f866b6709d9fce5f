{{/*
Names. Every object of a release starts with the full name, so that two releases
can share a namespace; the operator's certificate Secrets use it as their prefix,
which makes broker N's Secret carry the name of broker N's pod.
*/}}
{{- define "epochlog.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "epochlog.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 40 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 40 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 40 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "epochlog.operatorName" -}}{{ include "epochlog.fullname" . }}-operator{{- end }}
{{/* The operator's headless Service for heartbeats: its name resolves to every Ready replica. */}}
{{- define "epochlog.operatorHeartbeatName" -}}{{ include "epochlog.operatorName" . }}-heartbeat{{- end }}
{{- define "epochlog.brokerName" -}}{{ include "epochlog.fullname" . }}-broker{{- end }}
{{- define "epochlog.clientName" -}}{{ include "epochlog.fullname" . }}-client{{- end }}
{{- define "epochlog.accessPolicyName" -}}{{ include "epochlog.fullname" . }}-access-policy{{- end }}
{{- /* The policy the operator writes from EpochlogUsers (users.enabled), brokers mount. */ -}}
{{- define "epochlog.brokerAccessPolicyName" -}}{{ include "epochlog.fullname" . }}-broker-access-policy{{- end }}
{{- define "epochlog.usersEnabled" -}}{{ and .Values.tls.enabled .Values.users.enabled }}{{- end }}
{{- define "epochlog.testTokenName" -}}{{ include "epochlog.fullname" . }}-test-token{{- end }}
{{- define "epochlog.pipelineTokenName" -}}{{ include "epochlog.fullname" . }}-pipeline-token{{- end }}
{{- define "epochlog.pipelineName" -}}{{ include "epochlog.fullname" . }}-pipeline{{- end }}
{{/* A ClusterKopfPeering is cluster-scoped: its default name carries the namespace. */}}
{{- define "epochlog.peeringName" -}}
{{- if .Values.operator.peeringName }}
{{- .Values.operator.peeringName }}
{{- else if .Values.clusterWide }}
{{- printf "%s-%s" .Release.Namespace (include "epochlog.fullname" .) | trimPrefix "-" }}
{{- else }}
{{- include "epochlog.fullname" . }}
{{- end }}
{{- end }}

{{- define "epochlog.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/name: {{ include "epochlog.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: epochlog
{{- end }}

{{- define "epochlog.selector" -}}
app.kubernetes.io/name: {{ include "epochlog.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{- define "epochlog.image" -}}
{{- $tag := default .root.Chart.AppVersion .image.tag -}}
{{- printf "%s:%s" .image.repository $tag }}
{{- end }}

{{/* The in-cluster DNS suffix of a Service: <service>.<namespace>.svc */}}
{{- define "epochlog.svc" -}}
{{- printf "%s.%s.svc" .name .root.Release.Namespace }}
{{- end }}

{{- define "epochlog.scheme" -}}
{{- if .Values.tls.enabled }}https{{ else }}http{{ end }}
{{- end }}

{{/* Where brokers send heartbeats: the operator's headless Service. The name resolves to
every Ready replica; a broker finds the acting one (the others answer NOT_CONTROLLER) and
verifies TLS against this name. */}}
{{- define "epochlog.controllerUrl" -}}
{{- printf "%s://%s:%d" (include "epochlog.scheme" .) (include "epochlog.svc" (dict "name" (include "epochlog.operatorHeartbeatName" .) "root" .)) (int .Values.operator.port) }}
{{- end }}

{{/* The client Service, for producers, consumers and `helm test`. */}}
{{- define "epochlog.bootstrapUrl" -}}
{{- printf "%s://%s:%d" (include "epochlog.scheme" .) (include "epochlog.svc" (dict "name" (include "epochlog.clientName" .) "root" .)) (int .Values.broker.port) }}
{{- end }}

{{/* Host names in broker {id}'s certificate: its own Service, its pod name under the
governing Service, and the client Service. */}}
{{- define "epochlog.brokerHosts" -}}
{{- $broker := include "epochlog.brokerName" . -}}
{{- $client := include "epochlog.clientName" . -}}
{{- $hosts := list (printf "%s-{id}.{namespace}.svc" $broker) (printf "%s-{id}.{namespace}.svc.%s" $broker .Values.clusterDomain) (printf "%s-{id}.%s.{namespace}.svc" $broker $broker) (printf "%s-{id}.%s.{namespace}.svc.%s" $broker $broker .Values.clusterDomain) (printf "%s.{namespace}.svc" $client) (printf "%s.{namespace}.svc.%s" $client .Values.clusterDomain) -}}
{{- join "," $hosts }}
{{- end }}

{{- define "epochlog.operatorHosts" -}}
{{- $op := include "epochlog.operatorName" . -}}
{{- $hb := include "epochlog.operatorHeartbeatName" . -}}
{{- join "," (list (printf "%s.{namespace}.svc" $op) (printf "%s.{namespace}.svc.%s" $op .Values.clusterDomain) (printf "%s.{namespace}.svc" $hb) (printf "%s.{namespace}.svc.%s" $hb .Values.clusterDomain)) }}
{{- end }}

{{/* Names of the Secrets the operator keeps (`--manage-certificates`), prefix = full name. */}}
{{- define "epochlog.certificateSecrets" -}}
{{- $prefix := include "epochlog.fullname" . -}}
{{- $names := list (printf "%s-cluster-ca" $prefix) (printf "%s-cluster-ca-cert" $prefix) (printf "%s-clients-ca" $prefix) (printf "%s-clients-ca-cert" $prefix) (printf "%s-operator" $prefix) -}}
{{- range $id := until (int .Values.broker.replicas) }}
{{- $names = append $names (printf "%s-broker-%d" $prefix $id) }}
{{- end }}
{{- toJson $names }}
{{- end }}

{{- define "epochlog.containerSecurityContext" -}}
runAsNonRoot: true
runAsUser: {{ .Values.securityContext.runAsUser }}
runAsGroup: {{ .Values.securityContext.runAsGroup }}
readOnlyRootFilesystem: true
allowPrivilegeEscalation: false
capabilities:
  drop: [ALL]
seccompProfile:
  type: RuntimeDefault
{{- end }}

{{- define "epochlog.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: {{ .Values.securityContext.runAsUser }}
runAsGroup: {{ .Values.securityContext.runAsGroup }}
fsGroup: {{ .Values.securityContext.fsGroup }}
fsGroupChangePolicy: OnRootMismatch
seccompProfile:
  type: RuntimeDefault
{{- end }}

{{/* The test Partition `helm test` writes to and reads from. */}}
{{- define "epochlog.testPartition" -}}
{{- printf "%s-0" .Values.tests.topic }}
{{- end }}
