// The names CoreDNS would answer for a cluster's Endpoints, as hosts-file lines (sorted,
// without duplicates), for scripts/k8s/dns-sync.mjs:
//   <ip> <service>.<namespace>.svc.<domain>             every ready endpoint of the Service
//   <ip> <hostname>.<service>.<namespace>.svc.<domain>  an endpoint with a hostname (the
//                                                        pods of a StatefulSet)
// Addresses the endpoints controller lists as not ready are left out, as CoreDNS does; a
// Service with publishNotReadyAddresses has them among the ready ones already.
export function hostsLines(endpointsList, domain) {
  const lines = [];
  for (const ep of endpointsList.items) {
    const { name, namespace } = ep.metadata;
    const svc = `${name}.${namespace}.svc.${domain}`;
    for (const subset of ep.subsets ?? []) {
      for (const a of subset.addresses ?? []) {
        lines.push(`${a.ip} ${svc}`);
        if (a.hostname) lines.push(`${a.ip} ${a.hostname}.${svc}`);
      }
    }
  }
  return [...new Set(lines)].sort();
}
