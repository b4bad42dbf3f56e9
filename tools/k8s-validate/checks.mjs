// What the schema cannot say about a set of manifests (validate.mjs's
// "rules" check). checkAll(objects) takes every API object of the files
// validated together ({obj, ...}) and returns [{o, path, text}], path being
// the keys and indices of the offending field.
//
// - names: DNS-1123 object names, DNS-1035 Service names, valid labels;
// - selectors: a workload's selector matches its own pod template; every
//   Service, PodDisruptionBudget and NetworkPolicy selector (and a
//   NetworkPolicy's ingress podSelectors) matches a pod template of the set;
//   a Service's named targetPort is a port of the pods it selects;
// - discovery: a headless Service sets publishNotReadyAddresses: true; a
//   StatefulSet's serviceName and a pod template's subdomain name a headless
//   Service of the set that selects those pods; a JobSet keeps its DNS
//   hostnames and publishes them before readiness;
// - pods: every pod template is selected by a NetworkPolicy; no host
//   namespaces or hostPath volumes; no service account token;
// - containers: cpu and memory requests and limits (requests <= limits);
//   the restricted security context (runAsNonRoot, a non-zero runAsUser,
//   allowPrivilegeEscalation false, capabilities drop ALL and add none, not
//   privileged, seccompProfile RuntimeDefault or Localhost,
//   readOnlyRootFilesystem), from the container or the pod; volume mounts of
//   declared volumes; probe ports the container declares;
// - rdzv: the node (rdzvd --role=node) is a native sidecar (an init
//   container with restartPolicy: Always) with startup, readiness and
//   liveness probes that need no job (TCP, or `rdzvctl ... stats`); its
//   pod's RDZV_ADDR is its --unix socket; a root has readiness and liveness
//   probes, and with RDZVD_ETCD an RDZVD_ADVERTISE;
// - secrets (rdzvd's --secret-file, --secret-dir / RDZVD_SECRET_DIR): the
//   path lies in a Secret volume the container mounts; the files' mode
//   lets no "other" read them (rdzvd refuses such a file; Kubernetes'
//   default mode, 0644, does); a non-root pod has an fsGroup (else the
//   files are root's and unreadable); a node's pod mounts only its job's
//   key (items), named as the ranks' literal RDZV_JOB, and its ranks and
//   exec probes (rdzvctl) have the secret too; a root's directory is the
//   whole Secret, not a subPath (a subPath is never refreshed: jobs added
//   later would never reach it);
// - jobs: backoffLimit and podFailurePolicy set (restartPolicy Never, exit
//   code rules naming a main container); an Indexed Job runs all its pods
//   at once (parallelism = completions); a literal WORLD_SIZE is
//   completions x replicas x LOCAL_WORLD_SIZE; in a JobSet of several Jobs,
//   RDZV_JOB is not the per-Job UID, RDZV_HOST is set (the completion
//   index repeats per Job); as JobSet's webhook: rule names,
//   targetReplicatedJobs, the subdomain, pod name lengths, no dependsOn on
//   the first replicatedJob;
// - PyTorch: a node's --tcpstore-listen is on loopback (PyTorch's TCPStore
//   protocol has no authentication; rdzvd refuses another address without
//   --tcpstore-remote) with a fixed port, and serves the ranks' RDZV_JOB
//   (--tcpstore-job); a trainer whose MASTER_ADDR/MASTER_PORT are its
//   node's front end has TORCHELASTIC_USE_AGENT_STORE=True (else rank 0
//   starts a server on the node's port); a RANK is not one literal for
//   every pod; torchrun's rdzv backend names the node's socket as its
//   endpoint, --nnodes' maximum is the tree's pods, and the node counts
//   one join a pod (RDZV_LOCAL_RANKS 1: the agent joins, not the workers).

const DNS1123_SUBDOMAIN = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/;
const DNS1123_LABEL = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/;
const DNS1035_LABEL = /^[a-z]([-a-z0-9]*[a-z0-9])?$/;
const LABEL_VALUE = /^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$/;
const LABEL_NAME = /^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$/;
const JOBSET_RULE_NAME = /^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$/;

const isObj = (v) => v !== null && typeof v === "object" && !Array.isArray(v);
const arr = (v) => (Array.isArray(v) ? v : []);

// Every pod template of an object: {tpl, path, job, jobPath, replicas}.
function podTemplates(o) {
  const { kind, spec } = o.obj;
  const out = [];
  if (!isObj(spec)) return out;
  switch (kind) {
    case "Pod":
      out.push({ tpl: o.obj, path: [] });
      break;
    case "Deployment":
    case "StatefulSet":
    case "DaemonSet":
    case "ReplicaSet":
      if (isObj(spec.template)) out.push({ tpl: spec.template, path: ["spec", "template"] });
      break;
    case "Job":
      if (isObj(spec.template))
        out.push({ tpl: spec.template, path: ["spec", "template"], job: spec, jobPath: ["spec"], replicas: 1 });
      break;
    case "CronJob": {
      const js = isObj(spec.jobTemplate) ? spec.jobTemplate.spec : undefined;
      if (isObj(js) && isObj(js.template))
        out.push({ tpl: js.template, path: ["spec", "jobTemplate", "spec", "template"], job: js,
          jobPath: ["spec", "jobTemplate", "spec"], replicas: 1 });
      break;
    }
    case "JobSet": {
      const rjs = arr(spec.replicatedJobs);
      const jobs = rjs.reduce((n, rj) => n + (isObj(rj) && Number.isInteger(rj.replicas) ? rj.replicas : 1), 0);
      rjs.forEach((rj, i) => {
        const js = isObj(rj) && isObj(rj.template) ? rj.template.spec : undefined;
        if (isObj(js) && isObj(js.template))
          out.push({ tpl: js.template, path: ["spec", "replicatedJobs", i, "template", "spec", "template"], job: js,
            jobPath: ["spec", "replicatedJobs", i, "template", "spec"],
            replicas: Number.isInteger(rj.replicas) ? rj.replicas : 1, jobsetJobs: jobs });
      });
      break;
    }
  }
  return out;
}

const labelsOf = (tpl) => (isObj(tpl.metadata) && isObj(tpl.metadata.labels) ? tpl.metadata.labels : {});

// A plain map selector (Service) or a LabelSelector (matchLabels,
// matchExpressions) against a label map.
function mapMatches(sel, labels) {
  return Object.entries(sel).every(([k, v]) => labels[k] === v);
}
function selectorMatches(sel, labels) {
  if (!isObj(sel)) return false;
  if (isObj(sel.matchLabels) && !mapMatches(sel.matchLabels, labels)) return false;
  for (const e of arr(sel.matchExpressions)) {
    const has = Object.prototype.hasOwnProperty.call(labels, e.key);
    const vals = arr(e.values);
    if (e.operator === "In" && !(has && vals.includes(labels[e.key]))) return false;
    if (e.operator === "NotIn" && has && vals.includes(labels[e.key])) return false;
    if (e.operator === "Exists" && !has) return false;
    if (e.operator === "DoesNotExist" && has) return false;
  }
  return true;
}

// "500m" -> 0.5, "2Gi" -> 2147483648; NaN when unreadable.
const SUFFIX = { m: 1e-3, k: 1e3, M: 1e6, G: 1e9, T: 1e12, P: 1e15, E: 1e18,
  Ki: 2 ** 10, Mi: 2 ** 20, Gi: 2 ** 30, Ti: 2 ** 40, Pi: 2 ** 50, Ei: 2 ** 60 };
function quantity(q) {
  if (typeof q === "number") return q;
  const m = /^([+-]?[0-9.]+(?:[eE][+-]?[0-9]+)?)([a-zA-Z]*)$/.exec(String(q));
  if (!m) return NaN;
  if (m[2] === "") return Number(m[1]);
  return m[2] in SUFFIX ? Number(m[1]) * SUFFIX[m[2]] : NaN;
}

function commandText(c) {
  return [...arr(c.command), ...arr(c.args)].map(String).join(" ");
}
function envValue(c, name) {
  const e = arr(c.env).find((x) => isObj(x) && x.name === name);
  return e ? e : undefined;
}
// rdzvd's role in a container: from the command line or RDZVD_ROLE.
function rdzvdRole(c) {
  const cmd = commandText(c);
  if (!/\brdzvd\b/.test(cmd)) return undefined;
  const m = /--role[= ](\w+)/.exec(cmd);
  if (m) return m[1];
  const e = envValue(c, "RDZVD_ROLE");
  return e && typeof e.value === "string" ? e.value : "root";
}

export function checkAll(objects) {
  const out = [];
  const bad = (o, path, text) => out.push({ o, path, text });

  const templates = [];
  for (const o of objects) for (const t of podTemplates(o)) templates.push({ o, ...t });
  const services = objects.filter((o) => o.obj.kind === "Service" && o.obj.apiVersion === "v1");
  const headless = (s) => isObj(s.obj.spec) && s.obj.spec.clusterIP === "None";
  const policies = objects.filter((o) => o.obj.kind === "NetworkPolicy");

  for (const o of objects) {
    const { kind, metadata, spec } = o.obj;
    // Names and labels.
    const name = isObj(metadata) ? metadata.name : undefined;
    if (typeof name !== "string" || name === "") bad(o, ["metadata"], "no metadata.name");
    else if (name.length > 253 || !DNS1123_SUBDOMAIN.test(name))
      bad(o, ["metadata", "name"], `${JSON.stringify(name)} is not a DNS-1123 subdomain`);
    else if (kind === "Service" && (name.length > 63 || !DNS1035_LABEL.test(name)))
      bad(o, ["metadata", "name"], `a Service name must be a DNS-1035 label: ${JSON.stringify(name)}`);
    const labelMaps = [[["metadata", "labels"], isObj(metadata) ? metadata.labels : undefined]];
    for (const t of podTemplates(o)) labelMaps.push([[...t.path, "metadata", "labels"], labelsOf(t.tpl)]);
    for (const [p, m] of labelMaps) {
      if (!isObj(m)) continue;
      for (const [k, v] of Object.entries(m)) {
        const [prefix, nm] = k.includes("/") ? k.split(/\/(.*)/s) : [undefined, k];
        if ((prefix !== undefined && (prefix.length > 253 || !DNS1123_SUBDOMAIN.test(prefix))) ||
            !nm || nm.length > 63 || !LABEL_NAME.test(nm))
          bad(o, [...p, k], `invalid label key ${JSON.stringify(k)}`);
        if (typeof v !== "string" || v.length > 63 || !LABEL_VALUE.test(v))
          bad(o, [...p, k], `invalid label value ${JSON.stringify(v)}`);
      }
    }
    if (!isObj(spec)) continue;

    // A workload's selector and its own template.
    if (["Deployment", "StatefulSet", "DaemonSet", "ReplicaSet"].includes(kind) ||
        (kind === "Job" && spec.manualSelector === true)) {
      const t = podTemplates(o)[0];
      if (t && isObj(spec.selector) && !selectorMatches(spec.selector, labelsOf(t.tpl)))
        bad(o, ["spec", "selector"], "the selector does not match the pod template's labels");
    }
    if (kind === "StatefulSet") {
      const svc = services.find((s) => s.obj.metadata.name === spec.serviceName);
      const t = podTemplates(o)[0];
      if (typeof spec.serviceName !== "string")
        bad(o, ["spec"], "no serviceName (the pods' stable DNS names)");
      else if (!svc || !headless(svc))
        bad(o, ["spec", "serviceName"], `no headless Service ${spec.serviceName} in these files`);
      else if (t && !(isObj(svc.obj.spec.selector) && mapMatches(svc.obj.spec.selector, labelsOf(t.tpl))))
        bad(o, ["spec", "serviceName"], `Service ${spec.serviceName} does not select these pods`);
    }

    // Services.
    if (kind === "Service" && o.obj.apiVersion === "v1") {
      if (headless(o) && spec.publishNotReadyAddresses !== true)
        bad(o, ["spec"], "a headless Service needs publishNotReadyAddresses: true (pods must be found before they are ready)");
      if (isObj(spec.selector)) {
        const sel = templates.filter((t) => mapMatches(spec.selector, labelsOf(t.tpl)));
        if (sel.length === 0) bad(o, ["spec", "selector"], "the selector matches no pod template in these files");
        arr(spec.ports).forEach((port, i) => {
          if (!isObj(port) || typeof port.targetPort !== "string") return;
          const named = sel.some((t) => containersOf(t.tpl).some(({ c }) =>
            arr(c.ports).some((cp) => isObj(cp) && cp.name === port.targetPort)));
          if (sel.length && !named)
            bad(o, ["spec", "ports", i, "targetPort"], `no selected container has a port named ${port.targetPort}`);
        });
      }
    }
    if (kind === "PodDisruptionBudget" && isObj(spec.selector) &&
        !templates.some((t) => selectorMatches(spec.selector, labelsOf(t.tpl))))
      bad(o, ["spec", "selector"], "the selector matches no pod template in these files");
    if (kind === "NetworkPolicy") {
      if (isObj(spec.podSelector) && !templates.some((t) => selectorMatches(spec.podSelector, labelsOf(t.tpl))))
        bad(o, ["spec", "podSelector"], "the podSelector matches no pod template in these files");
      arr(spec.ingress).forEach((rule, i) => {
        arr(isObj(rule) ? rule.from : undefined).forEach((peer, j) => {
          if (!isObj(peer) || !isObj(peer.podSelector) || peer.namespaceSelector !== undefined) return;
          if (!templates.some((t) => selectorMatches(peer.podSelector, labelsOf(t.tpl))))
            bad(o, ["spec", "ingress", i, "from", j, "podSelector"], "admits pods that no pod template in these files has");
        });
      });
    }
    if (kind === "JobSet") checkJobSet(o, bad);
  }

  for (const t of templates) checkPodTemplate(t, services, headless, policies, bad);
  for (const t of templates) checkSecrets(t, bad);
  return out;
}

// The value of a --NAME option in a container's command ("--NAME=V" or
// "--NAME V"), else of its environment variable env; undefined if neither.
const LOOPBACK = new Set(["127.0.0.1", "localhost", "[::1]", "::1"]);
// torchrun's options in a command line ("--rdzv-backend" or
// "--rdzv_backend", "=VALUE" or " VALUE").
function torchrunOption(cmd, name) {
  const re = new RegExp(`--${name.replace(/-/g, "[-_]")}[= ]([^\\s"']+)`);
  const m = re.exec(cmd);
  return m ? m[1] : undefined;
}

// PyTorch's wiring of a pod: the node's loopback TCPStore front end and
// what the trainers' env:// reads (see the header).
function checkPyTorch(o, tpl, at, node, pods, bad) {
  const ncmd = commandText(node.c);
  const listen = optionOf(node.c, "tcpstore-listen", "RDZVD_TCPSTORE_LISTEN");
  const mains = containersOf(tpl).filter(({ init }) => !init);
  const jobs = new Set(mains.map(({ c }) => envValue(c, "RDZV_JOB"))
    .filter((e) => e && typeof e.value === "string").map((e) => e.value));
  let port;
  // $(VAR) is expanded by the kubelet: not checked.
  const expanded = (v) => typeof v === "string" && v.includes("$(");
  if (listen !== undefined && !expanded(listen)) {
    // HOST:PORT, or a bare PORT (rdzvd: on 127.0.0.1).
    const m = /^(?:(.*):)?(\d+)$/.exec(listen);
    const host = m ? (m[1] === undefined ? "127.0.0.1" : m[1]) : "";
    port = m ? Number(m[2]) : NaN;
    if (!LOOPBACK.has(host) && !/--tcpstore-remote/.test(ncmd))
      bad(o, at(...node.sub), `the node's --tcpstore-listen ${listen} is not loopback: PyTorch's TCPStore protocol has no authentication (the pod's trainers reach it on 127.0.0.1)`);
    if (!(port >= 1 && port <= 65535))
      bad(o, at(...node.sub), `the node's --tcpstore-listen ${listen} has no fixed port: the trainers' MASTER_PORT must name it`);
    const tj = optionOf(node.c, "tcpstore-job", "RDZVD_TCPSTORE_JOB") || optionOf(node.c, "job", "RDZVD_JOB");
    if (tj === undefined)
      bad(o, at(...node.sub), "the node's TCPStore front end serves no job: --tcpstore-job (the trainers' RDZV_JOB)");
    else if (jobs.size && !jobs.has(tj))
      bad(o, at(...node.sub), `the node's --tcpstore-job ${tj} is not the trainers' RDZV_JOB ${[...jobs].join(", ")}`);
  }
  for (const { c, sub } of mains) {
    const env = arr(c.env);
    const ma = envValue(c, "MASTER_ADDR"), mp = envValue(c, "MASTER_PORT");
    const ai = env.indexOf(ma), pi = env.indexOf(mp);
    if (listen !== undefined && !expanded(listen) && ma && typeof ma.value === "string" && LOOPBACK.has(ma.value)) {
      if (!mp || String(mp.value) !== String(port))
        bad(o, at(...sub, "env", pi >= 0 ? pi : ai), `MASTER_PORT ${mp ? mp.value : "(none)"} is not the node's --tcpstore-listen port ${port}`);
      const ua = envValue(c, "TORCHELASTIC_USE_AGENT_STORE");
      if (!ua || ua.value !== "True")
        bad(o, at(...sub, "env"), "MASTER_ADDR/MASTER_PORT name the node's TCPStore front end but TORCHELASTIC_USE_AGENT_STORE is not \"True\": rank 0's env:// would start a server on the node's port");
    } else if (ma && typeof ma.value === "string" && LOOPBACK.has(ma.value) && mp && listen === undefined) {
      bad(o, at(...sub, "env", ai), "MASTER_ADDR is this pod's loopback but the node has no --tcpstore-listen");
    }
    const r = envValue(c, "RANK");
    if (r && typeof r.value === "string" && pods > 1)
      bad(o, at(...sub, "env", env.indexOf(r), "value"),
        `RANK ${r.value} is the same in every pod: take it from the pod's completion index (metadata.annotations['batch.kubernetes.io/job-completion-index'])`);
    // torchrun with rdzv's backend.
    const cmd = commandText(c);
    if (torchrunOption(cmd, "rdzv-backend") !== "rdzv") continue;
    const sock = /--unix[= ]([^\s"']+)/.exec(ncmd);
    const ep = torchrunOption(cmd, "rdzv-endpoint");
    if (ep !== undefined && !expanded(ep) && sock && ep !== `unix:${sock[1]}`)
      bad(o, at(...sub, "command"), `--rdzv-endpoint ${ep} is not the node's socket unix:${sock[1]}`);
    const nn = torchrunOption(cmd, "nnodes");
    const max = nn === undefined ? NaN : Number(nn.split(":").pop());
    if (nn !== undefined && !expanded(nn) && Number.isInteger(pods) && max !== pods)
      bad(o, at(...sub, "command"), `--nnodes ${nn}: its maximum is not the ${pods} pods of the tree (one torchrun agent a pod)`);
    const lr = envValue(node.c, "RDZV_LOCAL_RANKS");
    if (lr && lr.value !== "1")
      bad(o, at(...node.sub, "env", arr(node.c.env).indexOf(lr), "value"),
        `RDZV_LOCAL_RANKS ${lr.value}: under torchrun's rdzv backend a pod makes one join (its agent's): 1`);
  }
}

// rdzvd's HTTP probes (--http-listen): the path is one rdzvd serves for
// probes, the port is the one --http-listen binds, and a liveness probe
// asks /livez only (/readyz fails while a parent or etcd is away, and a
// liveness probe on it would restart the daemon for what a restart cannot
// mend).
function httpProbes(bad, o, c, cp, ports) {
  const listen = optionOf(c, "http-listen", "RDZVD_HTTP_LISTEN");
  const m = listen ? /:(\d+)$/.exec(listen) : null;
  for (const pr of ["startupProbe", "readinessProbe", "livenessProbe"]) {
    const g = isObj(c[pr]) ? c[pr].httpGet : undefined;
    if (!isObj(g)) continue;
    const path = String(g.path ?? "/").split("?")[0];
    if (!["/livez", "/readyz", "/health"].includes(path))
      bad(o, cp(pr, "httpGet", "path"), `rdzvd serves probes at /livez, /readyz and /health, not ${path}`);
    else if (pr === "livenessProbe" && path !== "/livez")
      bad(o, cp(pr, "httpGet", "path"), `a liveness probe on ${path} restarts rdzvd whenever its parent or etcd is away: use /livez`);
    if (!m) {
      bad(o, cp(pr, "httpGet"), "an HTTP probe, but rdzvd has no --http-listen (RDZVD_HTTP_LISTEN)");
      continue;
    }
    const p = ports.find((x) => x.name === g.port || x.containerPort === g.port);
    const num = p ? p.containerPort : g.port;
    if (typeof num === "number" && String(num) !== m[1])
      bad(o, cp(pr, "httpGet", "port"), `port ${num} is not the port of --http-listen ${listen}`);
  }
}

function optionOf(c, name, env) {
  const m = new RegExp(`--${name}[= ]([^\\s"']+)`).exec(commandText(c));
  if (m) return m[1];
  const e = envValue(c, env);
  return e && typeof e.value === "string" ? e.value : undefined;
}

// Where a file path of container c comes from: {mount, mi, vol, rest}
// (rest: the path below the mount), the longest mountPath that holds it.
function mountOf(c, volumes, file) {
  let best;
  arr(c.volumeMounts).forEach((m, mi) => {
    if (!isObj(m) || typeof m.mountPath !== "string") return;
    const mp = m.mountPath.replace(/\/+$/, "");
    if (file !== mp && !file.startsWith(`${mp}/`)) return;
    if (best && best.mount.mountPath.length >= mp.length) return;
    best = { mount: m, mi, vol: volumes.find((v) => isObj(v) && v.name === m.name), rest: file.slice(mp.length + 1) };
  });
  return best;
}

const octal = (m) => `0${m.toString(8)}`;

// Secret files that rdzvd reads: their volume, modes, keys and readers.
function checkSecrets(t, bad) {
  const { o, tpl, path } = t;
  const spec = isObj(tpl.spec) ? tpl.spec : {};
  const at = (...p) => [...path, ...p];
  const psc = isObj(spec.securityContext) ? spec.securityContext : {};
  const volumes = arr(spec.volumes);
  const volIndex = (v) => volumes.indexOf(v);
  const all = containersOf(tpl);
  const main = all.filter((x) => !x.init);
  // The job ids the ranks name literally.
  const jobIds = new Set(main.map(({ c }) => envValue(c, "RDZV_JOB")).filter((e) => e && typeof e.value === "string").map((e) => e.value));

  // A secret file (or directory, dir) at file in container x: where it
  // comes from, and whether its mode and owner let rdzvd read it.
  const source = (x, file, what, dir) => {
    const m = mountOf(x.c, volumes, file);
    if (!m || !m.vol) {
      bad(o, at(...x.sub, "volumeMounts"), `${what} ${file} is not in a volume this container mounts`);
      return undefined;
    }
    if (!isObj(m.vol.secret)) return undefined; // another kind: not checked
    const sec = m.vol.secret;
    const vp = at("spec", "volumes", volIndex(m.vol), "secret");
    const item = dir ? undefined : arr(sec.items).find((it) => isObj(it) && it.path === m.rest);
    const mode = item && Number.isInteger(item.mode) ? item.mode : Number.isInteger(sec.defaultMode) ? sec.defaultMode : 0o644;
    if ((mode & 0o007) !== 0)
      bad(o, item && Number.isInteger(item.mode) ? [...vp, "items", arr(sec.items).indexOf(item), "mode"] : [...vp, Number.isInteger(sec.defaultMode) ? "defaultMode" : "secretName"],
        `the ${what}'s files get mode ${octal(mode)}${Number.isInteger(sec.defaultMode) || item ? "" : " (Kubernetes' default)"}: others may read them, and rdzvd refuses such a secret (defaultMode: 288, i.e. 0440)`);
    const sc = isObj(x.c.securityContext) ? x.c.securityContext : {};
    const uid = sc.runAsUser !== undefined ? sc.runAsUser : psc.runAsUser;
    if (uid !== 0 && psc.fsGroup === undefined)
      bad(o, at("spec", "securityContext"), `no fsGroup: the ${what}'s files are root's, and user ${uid} cannot read them`);
    return { m, sec, vp, item };
  };

  for (const x of all) {
    const role = rdzvdRole(x.c);
    if (role === "node") {
      const file = optionOf(x.c, "secret-file", "RDZVD_SECRET_FILE");
      if (file === undefined) continue;
      const src = source(x, file, "node's --secret-file", false);
      if (src) {
        if (src.m.mount.subPath === undefined && !arr(src.sec.items).length)
          bad(o, [...src.vp, "secretName"], `mounts every key of Secret ${src.sec.secretName}: a job's pods mount only their job's key (items)`);
        else if (!src.item && src.m.mount.subPath === undefined)
          bad(o, [...src.vp, "items"], `no item has the path ${src.m.rest} of the node's --secret-file`);
        const key = src.item ? src.item.key : src.m.mount.subPath;
        if (typeof key === "string" && jobIds.size && !jobIds.has(key))
          bad(o, src.item ? [...src.vp, "items", arr(src.sec.items).indexOf(src.item), "key"] : at(...x.sub, "volumeMounts", src.m.mi, "subPath"),
            `the secret's key ${key} is not the job id ${[...jobIds].join(", ")} (RDZV_JOB): the roots look a job's secret up by its id`);
      }
      // Whoever talks to this node needs the secret: the ranks, and the
      // node's own exec probes.
      for (const y of main) {
        if (!envValue(y.c, "RDZV_ADDR")) continue;
        const sf = envValue(y.c, "RDZV_SECRET_FILE");
        if (!sf && !envValue(y.c, "RDZV_SECRET"))
          bad(o, at(...y.sub, "env"), "no RDZV_SECRET_FILE: the node requires the job's secret of its ranks");
        else if (sf && typeof sf.value === "string") source(y, sf.value, "ranks' RDZV_SECRET_FILE", false);
      }
      for (const pr of ["startupProbe", "readinessProbe", "livenessProbe"]) {
        const probe = x.c[pr];
        const cmd = isObj(probe) && isObj(probe.exec) ? arr(probe.exec.command).map(String) : [];
        if (!cmd.length || !/(^|\/)rdzvctl$/.test(cmd[0])) continue;
        if (!cmd.some((a) => a === "--secret-file" || a.startsWith("--secret-file=")) && !envValue(x.c, "RDZV_SECRET_FILE"))
          bad(o, at(...x.sub, pr, "exec", "command"), "the probe's rdzvctl has no secret (--secret-file): the node refuses it");
      }
    } else if (role === "root") {
      const d = optionOf(x.c, "secret-dir", "RDZVD_SECRET_DIR");
      if (d === undefined) continue;
      const src = source(x, d.replace(/\/+$/, ""), "root's --secret-dir", true);
      if (!src) continue;
      if (src.m.mount.subPath !== undefined)
        bad(o, at(...x.sub, "volumeMounts", src.m.mi, "subPath"), "the root's secret directory is mounted with subPath, which the kubelet never refreshes: keys added later would never reach the root");
      if (src.m.rest !== "")
        bad(o, at(...x.sub, "volumeMounts", src.m.mi), `the root's --secret-dir is ${d}, not the Secret volume's mountPath`);
      if (arr(src.sec.items).length)
        bad(o, [...src.vp, "items"], "the roots serve every job: they mount the whole Secret, not items");
    }
  }
}

// Init containers, then containers: {c, path, init}.
function containersOf(tpl) {
  const spec = isObj(tpl.spec) ? tpl.spec : {};
  const out = [];
  arr(spec.initContainers).forEach((c, i) => isObj(c) && out.push({ c, sub: ["spec", "initContainers", i], init: true }));
  arr(spec.containers).forEach((c, i) => isObj(c) && out.push({ c, sub: ["spec", "containers", i], init: false }));
  return out;
}

function checkPodTemplate(t, services, headless, policies, bad) {
  const { o, tpl, path } = t;
  const spec = isObj(tpl.spec) ? tpl.spec : {};
  const at = (...p) => [...path, ...p];
  const labels = labelsOf(tpl);

  if (!policies.some((p) => isObj(p.obj.spec) && selectorMatches(p.obj.spec.podSelector, labels)))
    bad(o, at("metadata", "labels"), "no NetworkPolicy in these files selects these pods");
  for (const f of ["hostNetwork", "hostPID", "hostIPC"])
    if (spec[f] === true) bad(o, at("spec", f), `${f} is not allowed`);
  if (spec.automountServiceAccountToken !== false)
    bad(o, at("spec"), "automountServiceAccountToken must be false (rdzv does not use the API)");
  const volumes = new Set();
  arr(spec.volumes).forEach((v, i) => {
    if (!isObj(v)) return;
    volumes.add(v.name);
    if (v.hostPath !== undefined) bad(o, at("spec", "volumes", i, "hostPath"), "hostPath volumes are not allowed");
  });
  if (typeof spec.subdomain === "string") {
    const svc = services.find((s) => s.obj.metadata.name === spec.subdomain);
    if (!svc || !headless(svc))
      bad(o, at("spec", "subdomain"), `no headless Service ${spec.subdomain} in these files`);
    else if (!(isObj(svc.obj.spec.selector) && mapMatches(svc.obj.spec.selector, labels)))
      bad(o, at("spec", "subdomain"), `Service ${spec.subdomain} does not select these pods`);
  }

  const psc = isObj(spec.securityContext) ? spec.securityContext : {};
  const main = new Set(arr(spec.containers).filter(isObj).map((c) => c.name));
  let node;
  for (const { c, sub, init } of containersOf(tpl)) {
    const cp = (...p) => at(...sub, ...p);
    // Resources.
    const r = isObj(c.resources) ? c.resources : {};
    for (const kind of ["requests", "limits"])
      for (const res of ["cpu", "memory"])
        if (!isObj(r[kind]) || r[kind][res] === undefined) bad(o, cp("resources"), `no ${kind}.${res}`);
    for (const res of ["cpu", "memory"]) {
      if (!isObj(r.requests) || !isObj(r.limits) || r.requests[res] === undefined || r.limits[res] === undefined) continue;
      const a = quantity(r.requests[res]), b = quantity(r.limits[res]);
      if (Number.isNaN(a)) bad(o, cp("resources", "requests", res), `unreadable quantity ${r.requests[res]}`);
      else if (Number.isNaN(b)) bad(o, cp("resources", "limits", res), `unreadable quantity ${r.limits[res]}`);
      else if (a > b) bad(o, cp("resources", "requests", res), `request ${r.requests[res]} above limit ${r.limits[res]}`);
    }
    // The restricted security context.
    const sc = isObj(c.securityContext) ? c.securityContext : {};
    const eff = (k) => (sc[k] !== undefined ? sc[k] : psc[k]);
    if (eff("runAsNonRoot") !== true) bad(o, cp("securityContext"), "runAsNonRoot is not true");
    const uid = eff("runAsUser");
    if (!Number.isInteger(uid) || uid === 0) bad(o, cp("securityContext"), "no non-zero runAsUser");
    if (sc.allowPrivilegeEscalation !== false) bad(o, cp("securityContext"), "allowPrivilegeEscalation is not false");
    if (sc.privileged === true) bad(o, cp("securityContext", "privileged"), "privileged");
    const caps = isObj(sc.capabilities) ? sc.capabilities : {};
    if (!arr(caps.drop).includes("ALL")) bad(o, cp("securityContext"), "capabilities do not drop ALL");
    if (arr(caps.add).length) bad(o, cp("securityContext", "capabilities", "add"), "capabilities added");
    const sp = eff("seccompProfile");
    if (!isObj(sp) || !["RuntimeDefault", "Localhost"].includes(sp.type))
      bad(o, cp("securityContext"), "no seccompProfile RuntimeDefault or Localhost");
    if (sc.readOnlyRootFilesystem !== true) bad(o, cp("securityContext"), "readOnlyRootFilesystem is not true");
    // Mounts and probe ports.
    arr(c.volumeMounts).forEach((m, i) => {
      if (isObj(m) && !volumes.has(m.name)) bad(o, cp("volumeMounts", i, "name"), `no volume ${m.name}`);
    });
    const ports = arr(c.ports).filter(isObj);
    for (const pr of ["startupProbe", "readinessProbe", "livenessProbe"]) {
      const probe = c[pr];
      if (!isObj(probe)) continue;
      for (const h of ["tcpSocket", "httpGet", "grpc"]) {
        if (!isObj(probe[h]) || probe[h].port === undefined) continue;
        const port = probe[h].port;
        if (!ports.some((p) => p.name === port || p.containerPort === port))
          bad(o, cp(pr, h, "port"), `${port} is not a port of this container`);
      }
    }
    // rdzv's daemons.
    const role = rdzvdRole(c);
    if (role) httpProbes(bad, o, c, cp, ports);
    if (role === "node") {
      node = { c, sub };
      if (!init || c.restartPolicy !== "Always")
        bad(o, cp(), "the rdzv node must be a native sidecar: an init container with restartPolicy: Always");
      for (const pr of ["startupProbe", "readinessProbe", "livenessProbe"]) {
        const probe = c[pr];
        if (!isObj(probe)) {
          bad(o, cp(), `the rdzv node has no ${pr}`);
          continue;
        }
        if (isObj(probe.tcpSocket) || isObj(probe.httpGet)) continue; // httpProbes
        const cmd = isObj(probe.exec) ? arr(probe.exec.command).map(String) : [];
        const ok = cmd.length && /(^|\/)rdzvctl$/.test(cmd[0]) && cmd.includes("stats") &&
          !cmd.some((a) => a === "--job" || a.startsWith("--job="));
        if (!ok) bad(o, cp(pr), "a node probe must need no job: httpGet /livez or /readyz, tcpSocket, or exec `rdzvctl ... stats`");
      }
    } else if (role === "root") {
      for (const pr of ["readinessProbe", "livenessProbe"])
        if (!isObj(c[pr])) bad(o, cp(), `the rdzv root has no ${pr}`);
      if (envValue(c, "RDZVD_ETCD") && !envValue(c, "RDZVD_ADVERTISE") && !/--advertise/.test(commandText(c)))
        bad(o, cp(), "an etcd-backed root needs RDZVD_ADVERTISE (its stable name)");
    }
  }
  // The ranks' RDZV_ADDR is their node's Unix socket.
  if (node) {
    const m = /--unix[= ]([^\s"']+)/.exec(commandText(node.c));
    for (const { c, sub, init } of containersOf(tpl)) {
      if (init) continue;
      const e = envValue(c, "RDZV_ADDR");
      const i = arr(c.env).indexOf(e);
      if (!e) bad(o, at(...sub), "no RDZV_ADDR (the node's socket)");
      else if (m && e.value !== `unix:${m[1]}`)
        bad(o, at(...sub, "env", i, "value"), `RDZV_ADDR is not the node's socket unix:${m[1]}`);
    }
  }

  if (node) {
    const js = t.job;
    const pods = js && Number.isInteger(js.completions)
      ? js.completions * (t.jobsetJobs !== undefined ? t.jobsetJobs : t.replicas) : undefined;
    checkPyTorch(o, tpl, at, node, pods, bad);
  }

  // Jobs.
  if (t.job) {
    const js = t.job;
    const jp = (...p) => [...t.jobPath, ...p];
    if (js.backoffLimit === undefined) bad(o, jp(), "no backoffLimit");
    if (!isObj(js.podFailurePolicy)) bad(o, jp(), "no podFailurePolicy");
    else {
      if (spec.restartPolicy !== "Never")
        bad(o, at("spec"), "a podFailurePolicy needs the pods' restartPolicy: Never");
      arr(js.podFailurePolicy.rules).forEach((rule, i) => {
        const ec = isObj(rule) ? rule.onExitCodes : undefined;
        if (isObj(ec) && ec.containerName !== undefined && !main.has(ec.containerName))
          bad(o, jp("podFailurePolicy", "rules", i, "onExitCodes", "containerName"),
            `${ec.containerName} is not one of the pod's containers`);
      });
    }
    if (js.completionMode === "Indexed") {
      if (!Number.isInteger(js.completions)) bad(o, jp(), "an Indexed Job needs completions");
      else if (js.parallelism !== js.completions)
        bad(o, jp("parallelism"), "every rank runs at once: parallelism must equal completions");
      for (const { c, sub, init } of containersOf(tpl)) {
        if (init) continue;
        const w = envValue(c, "WORLD_SIZE"), l = envValue(c, "LOCAL_WORLD_SIZE");
        if (!w || typeof w.value !== "string" || !Number.isInteger(js.completions)) continue;
        const local = l && typeof l.value === "string" ? Number(l.value) : 1;
        const pods = js.completions * (t.jobsetJobs !== undefined ? t.jobsetJobs : t.replicas);
        if (Number(w.value) !== pods * local)
          bad(o, at(...sub, "env", arr(c.env).indexOf(w), "value"),
            `WORLD_SIZE ${w.value} is not ${pods} pods x ${local} ranks`);
      }
      // The node's shape hints (--children from RDZV_HOSTS, --local-ranks
      // from RDZV_LOCAL_RANKS): the pods of the tree and a pod's ranks.
      if (node && Number.isInteger(js.completions)) {
        const pods = js.completions * (t.jobsetJobs !== undefined ? t.jobsetJobs : t.replicas);
        const cmd = commandText(node.c);
        const ne = (n) => {
          const e = envValue(node.c, n);
          return { e, i: arr(node.c.env).indexOf(e) };
        };
        const h = ne("RDZV_HOSTS"), lr = ne("RDZV_LOCAL_RANKS");
        if (/--children/.test(cmd) && !h.e)
          bad(o, at(...node.sub), "the node's --children needs RDZV_HOSTS (the tree's pods)");
        else if (h.e && Number(h.e.value) !== pods)
          bad(o, at(...node.sub, "env", h.i, "value"), `RDZV_HOSTS ${h.e.value} is not the tree's ${pods} pods`);
        const trainer = containersOf(tpl).find(({ c, init }) => !init && envValue(c, "RDZV_ADDR"));
        const l = trainer ? envValue(trainer.c, "LOCAL_WORLD_SIZE") : undefined;
        const local = l && typeof l.value === "string" ? Number(l.value) : 1;
        // (torchrun's rdzv backend: one join a pod, checkPyTorch's rule.)
        const torchrun = trainer && torchrunOption(commandText(trainer.c), "rdzv-backend") === "rdzv";
        if (/--local-ranks/.test(cmd) && !lr.e)
          bad(o, at(...node.sub), "the node's --local-ranks needs RDZV_LOCAL_RANKS (a pod's ranks)");
        else if (lr.e && !torchrun && Number(lr.e.value) !== local)
          bad(o, at(...node.sub, "env", lr.i, "value"),
            `RDZV_LOCAL_RANKS ${lr.e.value} is not the trainer's LOCAL_WORLD_SIZE ${local}`);
      }
    }
    if (t.jobsetJobs !== undefined && t.jobsetJobs > 1) {
      for (const { c, sub, init } of containersOf(tpl)) {
        if (init) continue;
        const e = envValue(c, "RDZV_JOB");
        const fp = e && isObj(e.valueFrom) && isObj(e.valueFrom.fieldRef) ? e.valueFrom.fieldRef.fieldPath : "";
        if (/controller-uid/.test(String(fp)))
          bad(o, at(...sub, "env", arr(c.env).indexOf(e)),
            "RDZV_JOB from the Job's UID differs between the JobSet's Jobs: give them one id (a literal: its key in rdzv-job-secrets)");
        // The default host name (pod-$JOB_COMPLETION_INDEX) repeats in
        // every Job of the JobSet: two pods would claim one host.
        const h = envValue(c, "RDZV_HOST");
        if (envValue(c, "RDZV_ADDR") && !h)
          bad(o, at(...sub, "env"),
            "no RDZV_HOST: the default (pod-$JOB_COMPLETION_INDEX) repeats in each of the JobSet's Jobs: set it from metadata.name");
      }
    }
  }
}

function checkJobSet(o, bad) {
  const spec = o.obj.spec;
  const names = arr(spec.replicatedJobs).filter(isObj).map((rj) => rj.name);
  names.forEach((n, i) => {
    if (names.indexOf(n) !== i) bad(o, ["spec", "replicatedJobs", i, "name"], `replicatedJob ${n} twice`);
    if (typeof n !== "string" || !DNS1123_LABEL.test(n))
      bad(o, ["spec", "replicatedJobs", i, "name"], `${JSON.stringify(n)} is not a DNS-1123 label`);
  });
  const rjs = arr(spec.replicatedJobs);
  if (isObj(rjs[0]) && rjs[0].dependsOn !== undefined)
    bad(o, ["spec", "replicatedJobs", 0, "dependsOn"], "the first replicatedJob cannot have dependsOn");
  // As JobSet's webhook: the longest pod name, plus the 5 random
  // characters, is a DNS-1035 label.
  rjs.forEach((rj, i) => {
    if (!isObj(rj) || !isObj(rj.template) || !isObj(rj.template.spec)) return;
    const js = rj.template.spec;
    if (js.completionMode !== "Indexed" || !Number.isInteger(js.completions)) return;
    const replicas = Number.isInteger(rj.replicas) ? rj.replicas : 1;
    const pod = `${o.obj.metadata.name}-${rj.name}-${replicas - 1}-${js.completions - 1}-abcde`;
    if (pod.length > 63 || !DNS1035_LABEL.test(pod))
      bad(o, ["spec", "replicatedJobs", i, "name"], `pod names like ${pod} are not DNS-1035 labels (63 characters at most)`);
  });
  const net = isObj(spec.network) ? spec.network : {};
  if (net.subdomain !== undefined && (typeof net.subdomain !== "string" || net.subdomain.length > 63 ||
      !DNS1035_LABEL.test(net.subdomain)))
    bad(o, ["spec", "network", "subdomain"], "the subdomain names a Service: a DNS-1035 label");
  if (net.enableDNSHostnames === false) bad(o, ["spec", "network", "enableDNSHostnames"], "the nodes find their parents by DNS name");
  if (net.publishNotReadyAddresses === false)
    bad(o, ["spec", "network", "publishNotReadyAddresses"], "pods must be found before they are ready");
  const fp = isObj(spec.failurePolicy) ? spec.failurePolicy : {};
  arr(fp.rules).forEach((r, i) => {
    if (!isObj(r)) return;
    if (typeof r.name !== "string" || !JOBSET_RULE_NAME.test(r.name))
      bad(o, ["spec", "failurePolicy", "rules", i, "name"], `invalid rule name ${JSON.stringify(r.name)}`);
    arr(r.targetReplicatedJobs).forEach((n, j) => {
      if (!names.includes(n)) bad(o, ["spec", "failurePolicy", "rules", i, "targetReplicatedJobs", j], `no replicatedJob ${n}`);
    });
  });
  const sp = isObj(spec.successPolicy) ? spec.successPolicy : {};
  arr(sp.targetReplicatedJobs).forEach((n, j) => {
    if (!names.includes(n)) bad(o, ["spec", "successPolicy", "targetReplicatedJobs", j], `no replicatedJob ${n}`);
  });
}
