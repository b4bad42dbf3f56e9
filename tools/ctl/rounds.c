/* rdzvctl rounds: a job's rendezvous generations as the root sees them
 * (the "rounds" of its statistics, round_timeline.c), printed for a
 * person. Pure: JSON text in, lines out. */
#include "tools/ctl/rounds.h"

#include <stdio.h>
#include <string.h>
#include <jansson.h>

static double secs(json_t *o, const char *k) {
  return (double)json_integer_value(json_object_get(o, k)) / 1000.0;
}

/* The previous world's places that changed hands in this generation. */
static void print_replaced(FILE *out, json_t *r) {
  size_t i;
  json_t *e;
  json_array_foreach (json_object_get(r, "replaced"), i, e) {
    const char *by = json_string_value(json_object_get(e, "by"));
    const char *lost = json_string_value(json_object_get(e, "lost"));
    const char *host = json_string_value(json_object_get(e, "host"));
    const char *how = json_is_true(json_object_get(e, "released"))
                          ? "rejoined but its segment was given up"
                          : "did not rejoin";
    if (by != NULL && strcmp(by, "closed") == 0)
      fprintf(out,
              "  replaced: host %s (node rank %lld) %s; its "
              "place closed up (no spare left)\n",
              lost ? lost : "?",
              json_integer_value(json_object_get(e, "node_rank")), how);
    else
      fprintf(out,
              "  replaced: host %s (node rank %lld) %s; %s "
              "%s took its place (ranks %lld-%lld)\n",
              lost ? lost : "?",
              json_integer_value(json_object_get(e, "node_rank")), how,
              by ? by : "?", host ? host : "?",
              json_integer_value(json_object_get(e, "first_rank")),
              json_integer_value(json_object_get(e, "first_rank")) +
                  json_integer_value(json_object_get(e, "ranks")) - 1);
  }
  long long more = json_integer_value(json_object_get(r, "replaced_left_out"));
  if (more > 0)
    fprintf(out, "  (and %lld more places replaced)\n", more);
}

static void print_round(FILE *out, const char *job, json_t *r) {
  const char *state = json_string_value(json_object_get(r, "state"));
  long long ranks = json_integer_value(json_object_get(r, "ranks"));
  long long hosts = json_integer_value(json_object_get(r, "hosts"));
  const char *rname = json_string_value(json_object_get(r, "round"));
  fprintf(out, "job %s, round %s, generation %lld: ", job, rname ? rname : "?",
          json_integer_value(json_object_get(r, "generation")));
  if (state != NULL && strcmp(state, "open") == 0)
    fprintf(out, "open for %.3f s", secs(r, "elapsed_ms"));
  else if (state != NULL && strcmp(state, "complete") == 0)
    fprintf(out, "complete in %.3f s", secs(r, "elapsed_ms"));
  else
    fprintf(out, "failed after %.3f s", secs(r, "elapsed_ms"));
  fprintf(out, ", %lld rank%s on %lld host%s (min %lld, max %lld)\n", ranks,
          ranks == 1 ? "" : "s", hosts, hosts == 1 ? "" : "s",
          json_integer_value(json_object_get(r, "min")),
          json_integer_value(json_object_get(r, "max")));
  size_t i;
  json_t *e;
  json_t *pts = json_object_get(r, "joined");
  if (json_array_size(pts) > 0) {
    fprintf(out, "  joined over time:");
    json_array_foreach (pts, i, e)
      fprintf(out, "%s %.3f s %lld (%lld host%s)", i ? "," : "", secs(e, "ms"),
              json_integer_value(json_object_get(e, "ranks")),
              json_integer_value(json_object_get(e, "hosts")),
              json_integer_value(json_object_get(e, "hosts")) == 1 ? "" : "s");
    fprintf(out, "\n");
  }
  json_t *last = json_object_get(r, "last_joined");
  if (json_array_size(last) > 0) {
    fprintf(out, "  last to join:");
    json_array_foreach (last, i, e)
      fprintf(out, "%s %s local rank %lld at %.3f s", i ? ";" : "",
              json_string_value(json_object_get(e, "host"))
                  ? json_string_value(json_object_get(e, "host"))
                  : "?",
              json_integer_value(json_object_get(e, "local_rank")),
              secs(e, "ms"));
    fprintf(out, "\n");
  }
  /* The generation's collectives: its unique ids (and their check-in),
   * its barriers, in the order they began. */
  json_array_foreach (json_object_get(r, "phases"), i, e) {
    const char *ps = json_string_value(json_object_get(e, "state"));
    const char *kind = json_string_value(json_object_get(e, "kind"));
    const char *name = json_string_value(json_object_get(e, "name"));
    fprintf(out, "  %s '%s': %lld of %lld from %.3f s to %.3f s",
            kind ? kind : "?", name ? name : "?",
            json_integer_value(json_object_get(e, "arrived")),
            json_integer_value(json_object_get(e, "count")),
            secs(e, "first_ms"), secs(e, "last_ms"));
    if (ps != NULL && strcmp(ps, "open") == 0)
      fprintf(out, ", open\n");
    else
      fprintf(out, ", %s at %.3f s\n", ps ? ps : "?", secs(e, "ended_ms"));
  }
  long long left_out =
      json_integer_value(json_object_get(r, "phases_left_out"));
  if (left_out > 0)
    fprintf(out, "  (and %lld later collectives not kept)\n", left_out);
  const char *missing = json_string_value(json_object_get(r, "missing"));
  if (missing != NULL)
    fprintf(out, "  missing: %s\n", missing);
  const char *reason = json_string_value(json_object_get(r, "reason"));
  if (reason != NULL)
    fprintf(out, "  reason: %s\n", reason);
  print_replaced(out, r);
  const char *doms = json_string_value(json_object_get(r, "domains"));
  if (doms != NULL)
    fprintf(out, "  domains: %s\n", doms);
  long long promoted =
      json_integer_value(json_object_get(r, "spares_promoted"));
  long long parked = json_integer_value(json_object_get(r, "parked_hosts"));
  if (promoted > 0 || parked > 0)
    fprintf(out, "  spares: %lld taken into the world, %lld host%s parked\n",
            promoted, parked, parked == 1 ? "" : "s");
  json_array_foreach (json_object_get(r, "earlier"), i, e) {
    const char *why = json_string_value(json_object_get(e, "reason"));
    const char *es = json_string_value(json_object_get(e, "state"));
    fprintf(out, "  earlier: generation %lld %s %.3f s, %lld ranks%s%s\n",
            json_integer_value(json_object_get(e, "generation")),
            es != NULL && strcmp(es, "complete") == 0 ? "complete in"
                                                      : "ended after",
            secs(e, "ms"), json_integer_value(json_object_get(e, "ranks")),
            why ? ": " : "", why ? why : "");
  }
}

/* rdzvctl members: the world by node rank, then the parked spares. */
static void print_members(FILE *out, const char *job, json_t *r) {
  const char *rname = json_string_value(json_object_get(r, "round"));
  long long hosts = json_integer_value(json_object_get(r, "world_hosts"));
  size_t i;
  json_t *e;
  fprintf(out, "job %s, round %s: world of generation %lld, %lld host%s", job,
          rname ? rname : "?",
          json_integer_value(json_object_get(r, "world_generation")), hosts,
          hosts == 1 ? "" : "s");
  const char *state = json_string_value(json_object_get(r, "state"));
  if (state != NULL && strcmp(state, "complete") != 0)
    fprintf(out, " (generation %lld is %s)",
            json_integer_value(json_object_get(r, "generation")), state);
  fprintf(out, "\n");
  json_array_foreach (json_object_get(r, "world"), i, e) {
    const char *dom = json_string_value(json_object_get(e, "domain"));
    long long first = json_integer_value(json_object_get(e, "first_rank"));
    long long n = json_integer_value(json_object_get(e, "ranks"));
    fprintf(out, "  node %lld: %s, ranks %lld-%lld, %s%s%s\n",
            json_integer_value(json_object_get(e, "node_rank")),
            json_string_value(json_object_get(e, "host"))
                ? json_string_value(json_object_get(e, "host"))
                : "?",
            first, first + n - 1,
            json_string_value(json_object_get(e, "role"))
                ? json_string_value(json_object_get(e, "role"))
                : "?",
            dom ? ", domain " : "", dom ? dom : "");
  }
  if ((long long)json_array_size(json_object_get(r, "world")) < hosts)
    fprintf(out, "  (and %lld more hosts not listed)\n",
            hosts - (long long)json_array_size(json_object_get(r, "world")));
  json_array_foreach (json_object_get(r, "parked"), i, e) {
    const char *dom = json_string_value(json_object_get(e, "domain"));
    fprintf(out, "  parked: %s, %lld rank%s%s%s\n",
            json_string_value(json_object_get(e, "host"))
                ? json_string_value(json_object_get(e, "host"))
                : "?",
            json_integer_value(json_object_get(e, "ranks")),
            json_integer_value(json_object_get(e, "ranks")) == 1 ? "" : "s",
            dom ? ", domain " : "", dom ? dom : "");
  }
  long long spare = json_integer_value(json_object_get(r, "spare_ranks"));
  if (spare > 0)
    fprintf(out, "  spares waiting in the open generation: %lld ranks\n",
            spare);
  print_replaced(out, r);
}

typedef void (*printer)(FILE *out, const char *job, json_t *r);

static int print_job_rounds(const char *stats, const char *job,
                            const char *round, FILE *out, char *err,
                            size_t errlen, printer print_one) {
  json_error_t je;
  json_t *o = json_loads(stats, 0, &je);
  if (o == NULL) {
    snprintf(err, errlen, "the statistics are not JSON: %s", je.text);
    return -1;
  }
  int rc = 0;
  json_t *jobs = json_object_get(o, "rounds");
  json_t *rounds = json_object_get(jobs, job);
  const char *role = json_string_value(json_object_get(o, "role"));
  const char *name = json_string_value(json_object_get(o, "name"));
  if (!json_is_object(jobs)) {
    snprintf(err, errlen,
             "daemon %s is a %s: rounds are kept at the root (ask it: "
             "rdzvctl --addr ROOT; a node's stats list its ancestors)",
             name ? name : "?", role ? role : "daemon without rounds");
    rc = -1;
  } else if (!json_is_object(rounds) || json_object_size(rounds) == 0) {
    snprintf(err, errlen, "root %s holds no round of job %s", name ? name : "?",
             job);
    rc = -1;
  } else if (round != NULL) {
    json_t *r = json_object_get(rounds, round);
    if (r == NULL) {
      snprintf(err, errlen, "root %s holds no round '%s' of job %s",
               name ? name : "?", round, job);
      rc = -1;
    } else {
      print_one(out, job, r);
    }
  } else {
    const char *k;
    json_t *r;
    json_object_foreach (rounds, k, r)
      print_one(out, job, r);
  }
  json_decref(o);
  return rc;
}

int rdzvctl_print_rounds(const char *stats, const char *job, const char *round,
                         FILE *out, char *err, size_t errlen) {
  return print_job_rounds(stats, job, round, out, err, errlen, print_round);
}

/* The job's quarantined hosts ("quarantine" of the root's statistics),
 * one line each; nothing when none (or not a root's statistics). Returns
 * how many hosts are quarantined. */
static long long print_quarantined(json_t *o, const char *job, FILE *out) {
  json_t *q = json_object_get(json_object_get(o, "quarantine"), job);
  long long n = json_integer_value(json_object_get(q, "quarantined_hosts"));
  size_t i;
  json_t *e;
  json_array_foreach (json_object_get(q, "quarantined"), i, e) {
    const char *h = json_string_value(json_object_get(e, "host"));
    const char *why = json_string_value(json_object_get(e, "reason"));
    fprintf(out, "  quarantined: %s: %s\n", h ? h : "?", why ? why : "");
  }
  if ((long long)json_array_size(json_object_get(q, "quarantined")) < n)
    fprintf(out, "  (and %lld more quarantined hosts not listed)\n",
            n - (long long)json_array_size(json_object_get(q, "quarantined")));
  return n;
}

int rdzvctl_print_members(const char *stats, const char *job, const char *round,
                          FILE *out, char *err, size_t errlen) {
  int rc = print_job_rounds(stats, job, round, out, err, errlen, print_members);
  json_t *o = rc == 0 ? json_loads(stats, 0, NULL) : NULL;
  if (o != NULL)
    print_quarantined(o, job, out);
  json_decref(o);
  return rc;
}

int rdzvctl_print_quarantine(const char *stats, const char *job, FILE *out,
                             char *err, size_t errlen) {
  json_error_t je;
  json_t *o = json_loads(stats, 0, &je);
  if (o == NULL) {
    snprintf(err, errlen, "the statistics are not JSON: %s", je.text);
    return -1;
  }
  if (!json_is_object(json_object_get(o, "rounds"))) {
    const char *role = json_string_value(json_object_get(o, "role"));
    const char *name = json_string_value(json_object_get(o, "name"));
    snprintf(err, errlen,
             "daemon %s is a %s: quarantined hosts are kept at the root (ask "
             "it: rdzvctl --addr ROOT)",
             name ? name : "?", role ? role : "daemon without rounds");
    json_decref(o);
    return -1;
  }
  fprintf(out, "job %s:\n", job);
  if (print_quarantined(o, job, out) == 0)
    fprintf(out, "  no host is quarantined\n");
  json_decref(o);
  return 0;
}
