{{/* Names, labels and the small pieces shared by the agent's and the collector's templates. */}}

{{- define "gpuwatch.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "gpuwatch.fullname" -}}
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

{{- define "gpuwatch.agent.fullname" -}}
{{- printf "%s-agent" (include "gpuwatch.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "gpuwatch.collector.fullname" -}}
{{- printf "%s-collector" (include "gpuwatch.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "gpuwatch.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/name: {{ include "gpuwatch.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: gpuwatch
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* Selector labels of one component: include "gpuwatch.selectorLabels" (dict "ctx" $ "component" "agent") */}}
{{- define "gpuwatch.selectorLabels" -}}
app.kubernetes.io/name: {{ include "gpuwatch.name" .ctx }}
app.kubernetes.io/instance: {{ .ctx.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "gpuwatch.componentLabels" -}}
{{ include "gpuwatch.labels" .ctx }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{/* image reference: include "gpuwatch.image" (dict "ctx" $ "image" .Values.agent.image) */}}
{{- define "gpuwatch.image" -}}
{{- if .image.digest -}}
{{- printf "%s@%s" .image.repository .image.digest -}}
{{- else -}}
{{- printf "%s:%s" .image.repository (default .ctx.Chart.AppVersion .image.tag) -}}
{{- end -}}
{{- end -}}

{{- define "gpuwatch.agent.serviceAccountName" -}}
{{- if .Values.agent.serviceAccount.create -}}
{{- default (include "gpuwatch.agent.fullname" .) .Values.agent.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.agent.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "gpuwatch.collector.serviceAccountName" -}}
{{- if .Values.collector.serviceAccount.create -}}
{{- default (include "gpuwatch.collector.fullname" .) .Values.collector.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.collector.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* Secret names: the user's existing Secret, else the one this chart makes. */}}
{{- define "gpuwatch.dbSecretName" -}}
{{- default (printf "%s-db" (include "gpuwatch.fullname" .)) .Values.database.existingSecret -}}
{{- end -}}

{{- define "gpuwatch.kafkaSaslSecretName" -}}
{{- default (printf "%s-kafka-sasl" (include "gpuwatch.fullname" .)) .Values.kafka.sasl.existingSecret -}}
{{- end -}}

{{- define "gpuwatch.kafkaTlsSecretName" -}}
{{- default (printf "%s-kafka-tls" (include "gpuwatch.fullname" .)) .Values.kafka.tls.existingSecret -}}
{{- end -}}

{{- define "gpuwatch.alertSecretName" -}}
{{- default (printf "%s-alert-secrets" (include "gpuwatch.fullname" .)) .Values.collector.alerting.existingSecret -}}
{{- end -}}

{{- define "gpuwatch.alertRulesConfigMapName" -}}
{{- default (printf "%s-alert-rules" (include "gpuwatch.fullname" .)) .Values.collector.alerting.existingConfigMap -}}
{{- end -}}

{{- define "gpuwatch.metricsTokenSecretName" -}}
{{- default (printf "%s-metrics-token" (include "gpuwatch.fullname" .)) .Values.collector.metrics.tokenSecret.name -}}
{{- end -}}

{{/* GPUWATCH_KAFKA_SECURITY_PROTOCOL from the TLS and SASL switches (telemetry/kafka_security.py). */}}
{{- define "gpuwatch.kafkaProtocol" -}}
{{- if and .Values.kafka.tls.enabled .Values.kafka.sasl.enabled -}}SASL_SSL
{{- else if .Values.kafka.sasl.enabled -}}SASL_PLAINTEXT
{{- else if .Values.kafka.tls.enabled -}}SSL
{{- else -}}PLAINTEXT
{{- end -}}
{{- end -}}

{{/* Kafka environment shared by agent and collector (GPUWATCH_KAFKA_*: telemetry/kafka_security.py). */}}
{{- define "gpuwatch.kafkaEnv" -}}
- name: GPUWATCH_KAFKA_BOOTSTRAP
  value: {{ .Values.kafka.bootstrap | quote }}
- name: GPUWATCH_KAFKA_TOPIC
  value: {{ .Values.kafka.topic | quote }}
- name: GPUWATCH_KAFKA_SECURITY_PROTOCOL
  value: {{ include "gpuwatch.kafkaProtocol" . }}
{{- if .Values.kafka.tls.enabled }}
{{- if or .Values.kafka.tls.existingSecret .Values.kafka.tls.ca }}
- name: GPUWATCH_KAFKA_SSL_CAFILE
  value: /etc/gpuwatch/kafka-tls/{{ .Values.kafka.tls.caKey }}
{{- end }}
{{- if .Values.kafka.tls.certKey }}
- name: GPUWATCH_KAFKA_SSL_CERTFILE
  value: /etc/gpuwatch/kafka-tls/{{ .Values.kafka.tls.certKey }}
{{- end }}
{{- if .Values.kafka.tls.keyKey }}
- name: GPUWATCH_KAFKA_SSL_KEYFILE
  value: /etc/gpuwatch/kafka-tls/{{ .Values.kafka.tls.keyKey }}
{{- end }}
{{- end }}
{{- if .Values.kafka.sasl.enabled }}
- name: GPUWATCH_KAFKA_SASL_MECHANISM
  value: {{ .Values.kafka.sasl.mechanism | quote }}
- name: GPUWATCH_KAFKA_SASL_USERNAME
  value: {{ .Values.kafka.sasl.username | quote }}
- name: GPUWATCH_KAFKA_SASL_PASSWORD_FILE
  value: /etc/gpuwatch/kafka-sasl/{{ .Values.kafka.sasl.passwordKey }}
{{- end }}
{{- end -}}

{{- define "gpuwatch.kafkaVolumeMounts" -}}
{{- if and .Values.kafka.tls.enabled (or .Values.kafka.tls.existingSecret .Values.kafka.tls.ca) }}
- name: kafka-tls
  mountPath: /etc/gpuwatch/kafka-tls
  readOnly: true
{{- end }}
{{- if .Values.kafka.sasl.enabled }}
- name: kafka-sasl
  mountPath: /etc/gpuwatch/kafka-sasl
  readOnly: true
{{- end }}
{{- end -}}

{{- define "gpuwatch.kafkaVolumes" -}}
{{- if and .Values.kafka.tls.enabled (or .Values.kafka.tls.existingSecret .Values.kafka.tls.ca) }}
- name: kafka-tls
  secret:
    secretName: {{ include "gpuwatch.kafkaTlsSecretName" . }}
    defaultMode: 0444
{{- end }}
{{- if .Values.kafka.sasl.enabled }}
- name: kafka-sasl
  secret:
    secretName: {{ include "gpuwatch.kafkaSaslSecretName" . }}
    defaultMode: 0444
    items:
      - key: {{ .Values.kafka.sasl.passwordKey }}
        path: {{ .Values.kafka.sasl.passwordKey }}
{{- end }}
{{- end -}}

{{/* NetworkPolicy egress rule: include "gpuwatch.egressRule" (dict "ports" .ports "to" .to "protocol" "TCP") */}}
{{- define "gpuwatch.egressRule" -}}
- ports:
  {{- range .ports }}
    - port: {{ . }}
      protocol: {{ $.protocol | default "TCP" }}
  {{- end }}
  {{- with .to }}
  to:
    {{- toYaml . | nindent 4 }}
  {{- end }}
{{- end -}}

{{/* Cross-field checks the schema cannot word well; each failure names the value to set. */}}
{{- define "gpuwatch.validate" -}}
{{- if and .Values.collector.enabled (not .Values.kafka.bootstrap) -}}
{{- fail "kafka.bootstrap is required when collector.enabled is true: set it to your Kafka's host:port (e.g. --set kafka.bootstrap=my-kafka-bootstrap.kafka:9092)" -}}
{{- end -}}
{{- if and .Values.collector.enabled (not .Values.database.dsn) (not .Values.database.existingSecret) -}}
{{- fail "the collector needs a database: set database.existingSecret (a Secret with key \"dsn\") or database.dsn" -}}
{{- end -}}
{{- if and .Values.database.dsn .Values.database.existingSecret -}}
{{- fail "set database.dsn or database.existingSecret, not both" -}}
{{- end -}}
{{- if and .Values.kafka.sasl.enabled (not .Values.kafka.sasl.username) -}}
{{- fail "kafka.sasl.enabled needs kafka.sasl.username" -}}
{{- end -}}
{{- if and .Values.kafka.sasl.enabled (not .Values.kafka.sasl.password) (not .Values.kafka.sasl.existingSecret) -}}
{{- fail "kafka.sasl.enabled needs kafka.sasl.password or kafka.sasl.existingSecret" -}}
{{- end -}}
{{- if and .Values.kafka.tls.enabled (or .Values.kafka.tls.certKey .Values.kafka.tls.keyKey) (not .Values.kafka.tls.existingSecret) -}}
{{- fail "kafka.tls.certKey/keyKey (mutual TLS) need kafka.tls.existingSecret holding the client certificate and key" -}}
{{- end -}}
{{- if and .Values.kafka.tls.keyKey (not .Values.kafka.tls.certKey) -}}
{{- fail "kafka.tls.keyKey needs kafka.tls.certKey" -}}
{{- end -}}
{{- if and .Values.collector.autoscaling.enabled (gt (int .Values.collector.autoscaling.minReplicas) (int .Values.collector.autoscaling.maxReplicas)) -}}
{{- fail (printf "collector.autoscaling.minReplicas (%v) must not exceed maxReplicas (%v)" .Values.collector.autoscaling.minReplicas .Values.collector.autoscaling.maxReplicas) -}}
{{- end -}}
{{- if and .Values.collector.enabled (gt (int64 .Values.collector.kafka.maxPartitionFetchBytes) (int64 .Values.collector.kafka.fetchMaxBytes)) -}}
{{- fail (printf "collector.kafka.maxPartitionFetchBytes (%v) must not exceed collector.kafka.fetchMaxBytes (%v)" (int64 .Values.collector.kafka.maxPartitionFetchBytes) (int64 .Values.collector.kafka.fetchMaxBytes)) -}}
{{- end -}}
{{- if and .Values.agent.enabled .Values.agent.probe.enabled .Values.kafka.bootstrap (ne (toString (.Values.agent.securityContext | default dict).runAsUser) "0") -}}
{{- fail "agent.probe.enabled needs the agent to run as root (agent.securityContext.runAsUser: 0): the kubelet creates agent.probe.hostPath owned by root (0755), where another user cannot bind the probe socket; set agent.probe.enabled=false, or runAsUser: 0" -}}
{{- end -}}
{{- if and .Values.agent.sampling (lt (float64 .Values.agent.sampling.intervalCeiling) (float64 .Values.agent.sampling.intervalFloor)) -}}
{{- fail (printf "agent.sampling.intervalCeiling (%v) must be >= intervalFloor (%v)" .Values.agent.sampling.intervalCeiling .Values.agent.sampling.intervalFloor) -}}
{{- end -}}
{{- end -}}
