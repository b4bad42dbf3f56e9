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
    json_array_foreach(pts, i, e)
      fprintf(out, "%s %.3f s %lld (%lld host%s)", i ? "," : "",
              secs(e, "ms"), json_integer_value(json_object_get(e, "ranks")),
              json_integer_value(json_object_get(e, "hosts")),
              json_integer_value(json_object_get(e, "hosts")) == 1 ? "" : "s");
    fprintf(out, "\n");
  }
  json_t *last = json_object_get(r, "last_joined");
  if (json_array_size(last) > 0) {
    fprintf(out, "  last to join:");
    json_array_foreach(last, i, e)
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
  json_array_foreach(json_object_get(r, "phases"), i, e) {
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
  json_array_foreach(json_object_get(r, "earlier"), i, e) {
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

int rdzvctl_print_rounds(const char *stats, const char *job,
                         const char *round, FILE *out, char *err,
                         size_t errlen) {
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
    snprintf(err, errlen, "root %s holds no round of job %s",
             name ? name : "?", job);
    rc = -1;
  } else if (round != NULL) {
    json_t *r = json_object_get(rounds, round);
    if (r == NULL) {
      snprintf(err, errlen, "root %s holds no round '%s' of job %s",
               name ? name : "?", round, job);
      rc = -1;
    } else {
      print_round(out, job, r);
    }
  } else {
    const char *k;
    json_t *r;
    json_object_foreach(rounds, k, r) print_round(out, job, r);
  }
  json_decref(o);
  return rc;
}
