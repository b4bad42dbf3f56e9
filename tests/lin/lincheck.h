/* A linearizability checker for histories of rdzv's key-value operations
 * (our own code, after Wing and Gong's search with Lowe's memoization:
 * "Testing for linearizability", G. Lowe, 2017).
 *
 * A history is what real clients recorded: for every operation its
 * client, kind, key, arguments, when it was called and when it returned
 * (monotonic ns; a call whose outcome is unknown, e.g. its connection
 * failed, has no return), and what it returned. The history is
 * linearizable when every operation can be given one instant between its
 * call and its return so that, in that order, each returns what the
 * sequential model below would: one map of keys to byte strings, as one
 * TCPStore server (or rdzv's root) keeps it.
 *
 * Every operation names one key, so the check runs per key (Herlihy and
 * Wing's locality: a history is linearizable iff each key's is). An
 * operation of unknown outcome may have taken effect at any instant after
 * its call or never; what it returned is not checked.
 *
 * Pure: no I/O but the report written to the FILE given. */
#ifndef RDZV_TESTS_LINCHECK_H
#define RDZV_TESTS_LINCHECK_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

/* Values and keys in a checked history are short strings. */
#define LIN_VAL_MAX 48
#define LIN_KEY_MAX 48

enum lin_kind {
  LIN_SET,    /* arg: value. Returns nothing. */
  LIN_GET,    /* returns found (1/0) and, if found, out = the value */
  LIN_CAS,    /* arg: expected ("" matches an absent key), arg2: desired;
                 returns found = 1 when swapped, out = the value after */
  LIN_ADD,    /* delta; returns num = the value after (absent counts 0) */
  LIN_APPEND, /* arg: appended (the key is created if absent) */
  LIN_DELETE, /* returns found = 1 when the key existed */
  LIN_CHECK,  /* returns found = 1 when the key exists (TCPStore CHECK) */
  LIN_WAIT,   /* returns (found = 1) once the key exists */
};

struct lin_op {
  int client;
  enum lin_kind kind;
  char key[LIN_KEY_MAX];
  char arg[LIN_VAL_MAX];
  char arg2[LIN_VAL_MAX];
  int64_t delta;
  uint64_t call_ns;
  uint64_t ret_ns; /* LIN_NO_RETURN: the outcome is unknown */
  bool found;
  int64_t num;
  char out[LIN_VAL_MAX];
};
#define LIN_NO_RETURN UINT64_MAX

/* Checks ops[0..n) (any order). Returns 1 when linearizable, 0 when not
 * (and writes to report, if not NULL, the key, then the shortest prefix
 * of that key's history, by time, that is not linearizable: its
 * operations from the earliest still running at its end), or -1 when a
 * key's history holds more than LIN_MAX_OPS operations or memory ran
 * out. */
#define LIN_MAX_OPS 4096
int lin_check(const struct lin_op *ops, size_t n, FILE *report);

/* One operation as a line ("client 3 cas k a->b [10.2 ms, 10.9 ms] =
 * swapped b") into buf (n bytes). */
void lin_format(const struct lin_op *op, uint64_t t0, char *buf, size_t n);

#endif
