{{/*
Names, labels and the pod template shared by the five workloads.
*/}}

{{- define "rlmesh.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* <release>-rlmesh, or the release name alone when it already contains the chart name. */}}
{{- define "rlmesh.fullname" -}}
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

{{/*
Name of a component's objects: (dict "root" $ "component" "rollout"). The prefix is cut to
44 characters so that "<prefix>-coordinator" stays within 63 and the trainer StatefulSet's
name within 52 (its pods' controller-revision-hash label appends 11 characters).
*/}}
{{- define "rlmesh.componentName" -}}
{{- printf "%s-%s" (include "rlmesh.fullname" .root | trunc 44 | trimSuffix "-") .component -}}
{{- end -}}

{{- define "rlmesh.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Labels on every object of the release. */}}
{{- define "rlmesh.labels" -}}
helm.sh/chart: {{ include "rlmesh.chart" . }}
app.kubernetes.io/name: {{ include "rlmesh.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: rlmesh
{{- end -}}

{{/* Selector labels of one component: (dict "root" $ "component" "rollout"). */}}
{{- define "rlmesh.selectorLabels" -}}
app.kubernetes.io/name: {{ include "rlmesh.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{/* All labels of one component's objects. */}}
{{- define "rlmesh.componentLabels" -}}
{{ include "rlmesh.labels" .root }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "rlmesh.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "rlmesh.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* Image reference of a component: its own repository/tag when set, else the global ones. */}}
{{- define "rlmesh.image" -}}
{{- $c := index .root.Values .component -}}
{{- $repo := default .root.Values.image.repository $c.image.repository -}}
{{- $tag := default (default .root.Chart.AppVersion .root.Values.image.tag) $c.image.tag -}}
{{- printf "%s:%s" $repo $tag -}}
{{- end -}}

{{/* Cluster DNS name of a component's Service. */}}
{{- define "rlmesh.serviceHost" -}}
{{- printf "%s.%s.svc.%s" (include "rlmesh.componentName" .) .root.Release.Namespace .root.Values.clusterDomain -}}
{{- end -}}

{{/*
API versions by what the cluster serves. `helm install` reads them from the API server;
`helm template` lists every version it knows whatever --kube-version says, so the Kubernetes
version decides too: policy/v1 PodDisruptionBudgets from 1.21, autoscaling/v2 from 1.23.
*/}}
{{- define "rlmesh.pdbApiVersion" -}}
{{- if and (.Capabilities.APIVersions.Has "policy/v1") (semverCompare ">=1.21-0" .Capabilities.KubeVersion.Version) -}}
policy/v1
{{- else -}}
policy/v1beta1
{{- end -}}
{{- end -}}

{{- define "rlmesh.hpaApiVersion" -}}
{{- if and (.Capabilities.APIVersions.Has "autoscaling/v2") (semverCompare ">=1.23-0" .Capabilities.KubeVersion.Version) -}}
autoscaling/v2
{{- else -}}
autoscaling/v2beta2
{{- end -}}
{{- end -}}

{{/*
"true" when the kubelet runs gRPC probes: beta and on by default from Kubernetes 1.24 (GA
in 1.27); before that the probes are HTTP.
*/}}
{{- define "rlmesh.grpcProbesAvailable" -}}
{{- semverCompare ">=1.24-0" .Capabilities.KubeVersion.Version -}}
{{- end -}}

{{/*
Name of the coordinator's Job: "<prefix>-coordinator-<hash>", the hash being the first 8
hex digits of the SHA-256 of its rendered pod template. A Job's pod template cannot change,
so a release whose coordinator pod changes (config, image, arguments, ...) gets a new Job,
which `helm upgrade` creates while deleting the old one, and an unchanged pod keeps the
same Job. The base is cut to 54 characters so the name stays within 63.
*/}}
{{- define "rlmesh.coordinatorJobName" -}}
{{- $base := include "rlmesh.componentName" (dict "root" . "component" "coordinator") | trunc 54 | trimSuffix "-" -}}
{{- printf "%s-%s" $base (include "rlmesh.coordinatorPodTemplate" . | sha256sum | trunc 8) -}}
{{- end -}}

{{/*
A probe of grpc.health.v1 (dict "root" $ "ports" <ports.<component>> "probe" <values of the
probe>). Kubernetes' gRPC probes speak plaintext only, and kubelets before 1.24 have none, so
with tls.enabled or on an older cluster the probe is an HTTP GET of /readyz on the metrics
port, which reports the same SERVING state.
*/}}
{{- define "rlmesh.grpcProbe" -}}
{{- if or .root.Values.tls.enabled (ne (include "rlmesh.grpcProbesAvailable" .root) "true") -}}
httpGet:
  path: /readyz
  port: {{ .ports.metrics }}
{{- else -}}
grpc:
  port: {{ .ports.grpc }}
{{- end }}
periodSeconds: {{ .probe.periodSeconds }}
failureThreshold: {{ .probe.failureThreshold }}
timeoutSeconds: {{ .probe.timeoutSeconds }}
{{- end -}}

{{/*
The pod template of one component: (dict "root" $ "component" "rollout"
"restartPolicy" "OnFailure" (optional) "initContainers" <yaml> (optional)
"extraVolumes" <yaml> (optional) "extraVolumeMounts" <yaml> (optional)).
*/}}
{{- define "rlmesh.podTemplate" -}}
{{- $root := .root -}}
{{- $c := index $root.Values .component -}}
{{- $ctx := dict "root" $root "component" .component -}}
{{- $ports := index $root.Values.ports .component -}}
{{- /* The chart's own labels and annotations of the pod: podLabels and podAnnotations may add keys, not repeat these. */ -}}
{{- $annotations := list "checksum/config" -}}
{{- if and (eq .component "reward") $root.Values.reward.files -}}
{{- $annotations = append $annotations "checksum/reward-files" -}}
{{- end -}}
{{- include "rlmesh.refuseChartKeys" (dict "path" (printf "%s.podLabels" .component) "keys" $c.podLabels "chart" (keys (include "rlmesh.componentLabels" $ctx | fromYaml)) "what" "label" "on" (printf "the %s pods" .component)) -}}
{{- include "rlmesh.refuseChartKeys" (dict "path" (printf "%s.podAnnotations" .component) "keys" $c.podAnnotations "chart" $annotations "what" "annotation" "on" (printf "the %s pods" .component)) -}}
metadata:
  labels:
    {{- include "rlmesh.componentLabels" $ctx | nindent 4 }}
    {{- with $c.podLabels }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  annotations:
    checksum/config: {{ include (print $root.Template.BasePath "/configmap.yaml") $root | sha256sum }}
    {{- if and (eq .component "reward") $root.Values.reward.files }}
    checksum/reward-files: {{ toYaml $root.Values.reward.files | sha256sum }}
    {{- end }}
    {{- with $c.podAnnotations }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
spec:
  serviceAccountName: {{ include "rlmesh.serviceAccountName" $root }}
  automountServiceAccountToken: false
  {{- with $root.Values.imagePullSecrets }}
  imagePullSecrets:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  securityContext:
    {{- toYaml $root.Values.podSecurityContext | nindent 4 }}
  {{- with $c.priorityClassName }}
  priorityClassName: {{ . }}
  {{- end }}
  {{- with .restartPolicy }}
  restartPolicy: {{ . }}
  {{- end }}
  {{- if not (kindIs "invalid" $c.terminationGracePeriodSeconds) }}
  terminationGracePeriodSeconds: {{ $c.terminationGracePeriodSeconds }}
  {{- end }}
  {{- with .initContainers }}
  initContainers:
    {{- . | nindent 4 }}
  {{- end }}
  containers:
    - name: {{ .component }}
      image: {{ include "rlmesh.image" $ctx | quote }}
      imagePullPolicy: {{ default $root.Values.image.pullPolicy $c.image.pullPolicy }}
      command: ["rlmesh-{{ .component }}"]
      # Relative paths (rlmesh.run_dir, runs/<experiment>) land in the writable /tmp.
      workingDir: /tmp
      args:
        - --config
        - /etc/rlmesh/config.yaml
        - --host
        - 0.0.0.0
        - --port
        - {{ $ports.grpc | quote }}
        - --metrics_port
        - {{ $ports.metrics | quote }}
        {{- range $c.extraArgs }}
        - {{ . | quote }}
        {{- end }}
      env:
        - name: POD_NAME
          valueFrom:
            fieldRef:
              fieldPath: metadata.name
        - name: POD_NAMESPACE
          valueFrom:
            fieldRef:
              fieldPath: metadata.namespace
        - name: POD_IP
          valueFrom:
            fieldRef:
              fieldPath: status.podIP
        {{- if has .component (list "trainer" "reference" "rollout") }}
        {{- with include "rlmesh.ncclEnv" $root | trim }}
        {{- . | nindent 8 }}
        {{- end }}
        {{- end }}
        {{- with $c.extraEnv }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
      ports:
        - name: grpc
          containerPort: {{ $ports.grpc }}
          protocol: TCP
        - name: metrics
          containerPort: {{ $ports.metrics }}
          protocol: TCP
      {{- if $c.probes.startup.enabled }}
      startupProbe:
        {{- include "rlmesh.grpcProbe" (dict "root" $root "ports" $ports "probe" $c.probes.startup) | nindent 8 }}
      {{- end }}
      {{- if $c.probes.liveness.enabled }}
      livenessProbe:
        {{- include "rlmesh.grpcProbe" (dict "root" $root "ports" $ports "probe" $c.probes.liveness) | nindent 8 }}
      {{- end }}
      {{- if $c.probes.readiness.enabled }}
      readinessProbe:
        {{- include "rlmesh.grpcProbe" (dict "root" $root "ports" $ports "probe" $c.probes.readiness) | nindent 8 }}
      {{- end }}
      {{- with $c.resources }}
      resources:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      securityContext:
        {{- toYaml $root.Values.securityContext | nindent 8 }}
      volumeMounts:
        - name: config
          mountPath: /etc/rlmesh/config.yaml
          subPath: config.yaml
          readOnly: true
        - name: tmp
          mountPath: /tmp
        - name: dshm
          mountPath: /dev/shm
        {{- if $root.Values.sharedData.existingClaim }}
        - name: shared-data
          mountPath: {{ $root.Values.sharedData.mountPath }}
          readOnly: true
        {{- end }}
        {{- if $root.Values.tls.enabled }}
        - name: tls
          mountPath: {{ $root.Values.tls.mountPath }}
          readOnly: true
        {{- end }}
        {{- if and (eq .component "reward") $root.Values.reward.files }}
        - name: reward-files
          mountPath: /etc/rlmesh/reward
          readOnly: true
        {{- end }}
        {{- with .extraVolumeMounts }}
        {{- . | nindent 8 }}
        {{- end }}
        {{- with $c.extraVolumeMounts }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
  volumes:
    - name: config
      configMap:
        name: {{ include "rlmesh.componentName" (dict "root" $root "component" "config") }}
    - name: tmp
      emptyDir:
        sizeLimit: {{ $root.Values.tmpSizeLimit }}
    - name: dshm
      emptyDir:
        medium: Memory
        sizeLimit: {{ $c.shmSizeLimit }}
    {{- if $root.Values.sharedData.existingClaim }}
    - name: shared-data
      persistentVolumeClaim:
        claimName: {{ $root.Values.sharedData.existingClaim }}
        readOnly: true
    {{- end }}
    {{- if $root.Values.tls.enabled }}
    - name: tls
      secret:
        secretName: {{ required "tls.secretName is required when tls.enabled is true" $root.Values.tls.secretName }}
        defaultMode: 0440
    {{- end }}
    {{- if and (eq .component "reward") $root.Values.reward.files }}
    - name: reward-files
      configMap:
        name: {{ include "rlmesh.componentName" (dict "root" $root "component" "reward-files") }}
    {{- end }}
    {{- with .extraVolumes }}
    {{- . | nindent 4 }}
    {{- end }}
    {{- with $c.extraVolumes }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  {{- with $c.nodeSelector }}
  nodeSelector:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with $c.tolerations }}
  tolerations:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with $c.affinity }}
  affinity:
    {{- toYaml . | nindent 4 }}
  {{- end }}
{{- end -}}

{{/*
Refuses a user-set label or annotation key that the chart writes on the same object itself,
which would appear twice in one mapping: (dict "path" <values path of the map> "keys" <the
map> "chart" <list of the chart's keys> "what" "label"|"annotation" "on" <the object, in words>).
*/}}
{{- define "rlmesh.refuseChartKeys" -}}
{{- $chart := .chart | sortAlpha -}}
{{- range $key := keys (default dict .keys) | sortAlpha -}}
{{- if has $key $chart -}}
{{- fail (printf "%s.%s: the chart writes the %s %s on %s itself, so it would appear twice; remove it from %s (the chart's own: %s)" $.path $key $.what $key $.on $.path (join ", " $chart)) -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* NCCL_* environment of the processes that exchange weights: trainer, reference, rollout. */}}
{{- define "rlmesh.ncclEnv" -}}
{{- $n := .Values.nccl -}}
{{- $vars := dict "NCCL_SOCKET_IFNAME" $n.socketIfname "NCCL_IB_DISABLE" $n.ibDisable "NCCL_IB_HCA" $n.ibHca "NCCL_P2P_DISABLE" $n.p2pDisable "NCCL_DEBUG" $n.debug -}}
{{- range $k, $v := $n.extraEnv }}{{ $_ := set $vars $k $v }}{{ end -}}
{{- range $k := keys $vars | sortAlpha }}
{{- $v := index $vars $k }}
{{- if ne (toString $v) "" }}
- name: {{ $k }}
  value: {{ $v | toString | quote }}
{{- end }}
{{- end }}
{{- end -}}

{{/*
Milliseconds of a Prometheus duration such as 10s, 1m30s or 1h (units y, w, d, h, m, s, ms;
a year is 365 days, as Prometheus counts it). values.schema.json checks the form.
*/}}
{{- define "rlmesh.durationMs" -}}
{{- $unit := dict "ms" 1 "s" 1000 "m" 60000 "h" 3600000 "d" 86400000 "w" 604800000 "y" 31536000000 -}}
{{- $total := 0 -}}
{{- range $part := regexFindAll "[0-9]+(ms|y|w|d|h|m|s)" (toString .) -1 }}
{{- $n := regexFind "^[0-9]+" $part -}}
{{- $total = add $total (mul (atoi $n) (get $unit (trimPrefix $n $part))) -}}
{{- end -}}
{{- $total -}}
{{- end -}}
