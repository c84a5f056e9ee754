// Cluster DNS for the one-node cluster of scripts/k8s/cluster.sh, which has no CoreDNS: every
// 2 s, writes the names CoreDNS would answer (dns-hosts.mjs) into a hosts file for dnsmasq
// and makes dnsmasq read it again (SIGHUP) when it changed.
// Without kube-proxy a Service's cluster IP leads nowhere, so every Service's name resolves
// to its endpoints, as a headless Service's does.
//   node scripts/k8s/dns-sync.mjs --kubectl K --kubeconfig F --hosts FILE --dnsmasq-pid-file P
import { execFileSync } from 'node:child_process';
import { readFileSync, renameSync, writeFileSync } from 'node:fs';
import { parseArgs } from 'node:util';
import { hostsLines } from './dns-hosts.mjs';

const { values: opt } = parseArgs({
  options: {
    kubectl: { type: 'string' }, kubeconfig: { type: 'string' }, hosts: { type: 'string' },
    'dnsmasq-pid-file': { type: 'string' }, domain: { type: 'string', default: 'cluster.local' },
  },
});

let last = null;
function sync() {
  let list;
  try {
    list = JSON.parse(execFileSync(opt.kubectl, ['--kubeconfig', opt.kubeconfig, 'get', 'endpoints', '-A', '-o', 'json'],
      { encoding: 'utf8', maxBuffer: 64 << 20, stdio: ['ignore', 'pipe', 'pipe'] }));
  } catch (e) {
    console.error(`dns-sync: ${e.message.split('\n')[0]}`);
    return;
  }
  const text = hostsLines(list, opt.domain).join('\n') + '\n';
  if (text === last) return;
  writeFileSync(`${opt.hosts}.tmp`, text);
  renameSync(`${opt.hosts}.tmp`, opt.hosts);
  last = text;
  try {
    process.kill(Number(readFileSync(opt['dnsmasq-pid-file'], 'utf8').trim()), 'SIGHUP');
  } catch (e) {
    console.error(`dns-sync: cannot signal dnsmasq: ${e.message}`);
  }
}

sync();
setInterval(sync, 2000);
