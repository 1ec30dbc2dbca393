{{/* The objects' base name: the release name, with "truthscale" added unless it has it. */}}
{{- define "truthscale.fullname" -}}
{{- if contains "truthscale" .Release.Name -}}
{{- .Release.Name | trunc 53 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-truthscale" .Release.Name | trunc 53 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* The component of the exporter's pods: node-agent or the sidecar's workload. */}}
{{- define "truthscale.component" -}}
{{- if eq .Values.mode "node" -}}node-agent{{- else -}}sidecar{{- end -}}
{{- end -}}

{{/* The labels of every object, less app.kubernetes.io/name. Values are quoted: a release or
workload name such as "123" or "true" is a number or a boolean to YAML, and a label must be a
string. */}}
{{- define "truthscale.commonLabels" -}}
app.kubernetes.io/instance: {{ .Release.Name | quote }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service | quote }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | quote }}
{{- end -}}

{{/* The labels of the chart's own objects. The sidecar's Deployment is named after its
workload instead (deployment.yaml): each key once. */}}
{{- define "truthscale.labels" -}}
app.kubernetes.io/name: truthscale
{{ include "truthscale.commonLabels" . }}
{{- end -}}

{{/* The labels that select the pods carrying the exporter. */}}
{{- define "truthscale.selectorLabels" -}}
{{- if eq .Values.mode "node" -}}
app.kubernetes.io/name: truthscale
app.kubernetes.io/instance: {{ .Release.Name | quote }}
app.kubernetes.io/component: node-agent
{{- else -}}
app.kubernetes.io/name: {{ .Values.sidecar.workload.name | quote }}
app.kubernetes.io/instance: {{ .Release.Name | quote }}
{{- end -}}
{{- end -}}

{{- define "truthscale.image" -}}
{{- if .Values.image.digest -}}
{{ .Values.image.repository }}@{{ .Values.image.digest }}
{{- else -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}
{{- end -}}

{{/* The pod's pull secrets, where any. */}}
{{- define "truthscale.imagePullSecrets" -}}
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/* serve's arguments. */}}
{{- define "truthscale.args" -}}
{{- $args := list "serve" -}}
{{- if eq .Values.mode "node" -}}{{- $args = concat $args (list "--mode" "node") -}}{{- end -}}
{{- if and (eq .Values.source "dcgm-exporter") .Values.dcgmExporterUrl -}}
{{- /* A dcgm-exporter on the pod network (the GPU Operator's default): its Service. */ -}}
{{- $args = concat $args (list "--source" (printf "dcgm-exporter:%s" .Values.dcgmExporterUrl)) -}}
{{- else if eq .Values.source "dcgm-exporter" -}}
{{- /* An IPv6 node IP goes in brackets in the URL (nodeIPv6). */ -}}
{{- $nodeIP := ternary "[$(NODE_IP)]" "$(NODE_IP)" (.Values.nodeIPv6 | default false) -}}
{{- $args = concat $args (list "--source" (printf "dcgm-exporter:http://%s:%d/metrics" $nodeIP (int .Values.dcgmExporterPort))) -}}
{{- else -}}
{{- $args = concat $args (list "--source" .Values.source) -}}
{{- end -}}
{{- /* listenAddress: 0.0.0.0, or [::] on IPv6 single-stack clusters; an IPv6 address goes in
brackets before the port. */ -}}
{{- $host := .Values.listenAddress | default "0.0.0.0" -}}
{{- if and (contains ":" $host) (not (hasPrefix "[" $host)) -}}{{- $host = printf "[%s]" $host -}}{{- end -}}
{{- $args = concat $args (list "--listen" (printf "%s:%d" $host (int .Values.port))) -}}
{{- if .Values.webConfig.secretName -}}
{{- $args = concat $args (list "--web-config" "/etc/truthscale/web.yml") -}}
{{- end -}}
{{- $args = concat $args .Values.extraArgs -}}
{{- toJson $args -}}
{{- end -}}

{{/* What both modes' truthscale containers share after args and env. No readiness probe:
a pod is Ready only when all its containers are, and /readyz answers 503 before the first
sample and while a read hangs, so on the sidecar it would take the inference pod out of its
Service. The node agent, a pod of its own, adds readiness on /readyz (daemonset.yaml). */}}
{{- define "truthscale.containerCommon" -}}
image: {{ include "truthscale.image" . | quote }}
imagePullPolicy: {{ .Values.image.pullPolicy }}
ports:
  - name: metrics
    containerPort: {{ .Values.port }}
    protocol: TCP
livenessProbe:
  {{- if .Values.webConfig.secretName }}
  # Basic auth covers /healthz, and the kubelet sends no credentials: the port, by TCP.
  tcpSocket:
    port: metrics
  {{- else }}
  # 503 once the sampler thread has ended or its last tick began too long ago.
  httpGet:
    path: /healthz
    port: metrics
  {{- end }}
  periodSeconds: 10
  timeoutSeconds: 2
  failureThreshold: 3
# `kubectl describe pod` shows the error of a failed start.
terminationMessagePolicy: FallbackToLogsOnError
{{- end -}}

{{/* The env entry giving the node's address, for the dcgm-exporter source. */}}
{{- define "truthscale.nodeIP" -}}
{{- if eq .Values.source "dcgm-exporter" }}
# The node's address, where dcgm-exporter listens.
- name: NODE_IP
  valueFrom:
    fieldRef:
      fieldPath: status.hostIP
{{- end }}
{{- end -}}

{{/* Whether the source reads NVML, and so needs the GPUs (the driver library and device
nodes) from the NVIDIA container runtime: nvml only. dcgm-exporter reads HTTP, sim nothing. */}}
{{- define "truthscale.readsNvml" -}}
{{- if eq .Values.source "nvml" -}}true{{- end -}}
{{- end -}}

{{/* Whether the cluster serves the Prometheus Operator's CRDs (PodMonitor, ServiceMonitor,
PrometheusRule). Without them the API server refuses those objects and the whole install
fails, so they are left out (NOTES.txt says so). `helm template` knows no cluster: pass
--api-versions monitoring.coreos.com/v1 to render them. */}}
{{- define "truthscale.hasMonitoringCRDs" -}}
{{- if .Capabilities.APIVersions.Has "monitoring.coreos.com/v1" -}}true{{- end -}}
{{- end -}}

{{/* The web config's Secret: its mount in the truthscale container, and the pod's volume. */}}
{{- define "truthscale.webConfigMount" -}}
{{- if .Values.webConfig.secretName }}
- name: truthscale-web-config
  mountPath: /etc/truthscale
  readOnly: true
{{- end }}
{{- end -}}
{{- define "truthscale.webConfigVolume" -}}
{{- if .Values.webConfig.secretName }}
# Not a subPath mount: the kubelet updates the files when the Secret changes (a renewed
# certificate), and truthscale reads the certificate again for new connections.
- name: truthscale-web-config
  secret:
    secretName: {{ .Values.webConfig.secretName | quote }}
{{- end }}
{{- end -}}
