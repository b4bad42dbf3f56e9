/* rdzv: one error space for the whole project.
 *
 * Every function returns int: 0 on success, a negative value on failure.
 * System failures are -errno, unchanged (e.g. -ECONNREFUSED). Conditions of
 * rdzv itself use the reserved block -1000 .. -1999 below. A value is never
 * reused for another meaning; new codes are appended. */
#ifndef RDZV_ERROR_H
#define RDZV_ERROR_H

#ifdef __cplusplus
extern "C" {
#endif

/* X(name, value, message) */
#define RDZV_ERRNO_MAP(X)                                                      \
  X(EPROTO, -1000, "malformed frame or message")                               \
  X(EPROTO_VERSION, -1001, "protocol version not supported")                   \
  X(EJOB_MISMATCH, -1002, "job id does not match this connection's job")       \
  X(ENEEDMORE, -1003, "need more bytes to decode a frame")                     \
  X(EFRAME_TOO_BIG, -1004, "frame larger than the configured limit")           \
  X(EKEY_TOO_LONG, -1005, "key longer than the configured limit")              \
  X(EVALUE_TOO_BIG, -1006, "value larger than the configured limit")           \
  X(ETOO_MANY_REQUESTS, -1007,                                                 \
    "too many outstanding requests on a connection")                           \
  X(ETOO_MANY_CONNECTIONS, -1008, "server is at its connection limit")         \
  X(EDEADLINE, -1009, "deadline passed")                                       \
  X(ENOKEY, -1010, "key not found")                                            \
  X(EWRITE_ONCE, -1011, "key is write-once: it cannot be changed or deleted")  \
  X(ECAS_FAILED, -1012, "compare-and-set: current value differs")              \
  X(ENOTCONN, -1013, "not connected")                                          \
  X(ECANCELED, -1014, "request canceled")                                      \
  X(EWOULDBLOCK_CB, -1015, "blocking call made from inside a callback")        \
  X(ENOT_NUMBER, -1016, "value is not a decimal int64")                        \
  X(ECOUNT_MISMATCH, -1017, "collective member count differs between members") \
  X(ECONN_CLOSED, -1018, "peer closed the connection")                         \
  X(EHELLO, -1019, "first frame was not a valid hello")                        \
  X(EBAD_ROLE, -1020, "operation not allowed for this peer role")              \
  X(EBAD_ADDR, -1021, "address not understood")                                \
  X(EJOB_ID_MISSING, -1022, "job id missing, empty or over 255 bytes")         \
  X(ESTALE_GENERATION, -1023, "request from an older generation")              \
  X(EABORTED, -1024, "aborted")                                                \
  X(ENOMEM, -1025, "out of memory")                                            \
  X(ENCCL_MISSING, -1026, "NCCL library not found or not loadable")            \
  X(ENCCL_SYMBOL, -1027, "NCCL library lacks a required symbol")               \
  X(ENCCL_VERSION, -1028, "NCCL library older than required")                  \
  X(ENCCL, -1029, "an NCCL call failed")                                       \
  X(EDUPLICATE_CLAIM, -1030, "two processes claim one host and local rank")    \
  X(EROUND_FAILED, -1031, "the rendezvous round failed")                       \
  X(ETOPOLOGY, -1032, "no topology record for that rank or host")              \
  X(ENOT_MEMBER, -1033, "this rank is not a member of the communicator")       \
  X(ENAME_USED, -1034,                                                         \
    "communicator name already initialized in this generation")                \
  X(EUNREACHABLE, -1035, "a daemon on the way could not reach its parent")     \
  X(ESILENT, -1036,                                                            \
    "a daemon went silent past the liveness timeout (stopped or wedged)")      \
  X(EJOB_FULL, -1037,                                                          \
    "the job's memory cap at the root is reached (--max-job-bytes)")           \
  X(EFENCED, -1038,                                                            \
    "stale request of a daemon or session declared lost: refused")             \
  X(EETCD, -1039, "etcd refused or failed the request (its message follows)")  \
  X(ELEASE_LOST, -1040, "etcd lease lost (expired or revoked)")                \
  X(ENOT_LEADER, -1041, "this root is a standby: the leader is elsewhere")     \
  X(ECOMPACTED, -1042, "etcd revision compacted: read again, then watch")      \
  X(ETOO_LARGE, -1043,                                                         \
    "etcd request over the server's size or operation limit")                  \
  X(EAUTH, -1044,                                                              \
    "authentication failed (no job secret, another one, or a uid not "         \
    "allowed)")                                                                \
  X(EROUND_FULL, -1045,                                                        \
    "the rendezvous round is complete at its maximum size: no room to join")   \
  X(EPARKED, -1046,                                                            \
    "parked as a spare: not in the generation's world until a place opens")    \
  X(EEXCLUDED, -1047,                                                          \
    "this rank is on the communicator's agreed exclude list (declared lost)")  \
  X(EQUARANTINED, -1048,                                                       \
    "the host is quarantined for the job (a failed health check, or by "       \
    "hand): rdzvctl quarantine")                                               \
  X(ETLS, -1049, "TLS failed (a certificate refused, or TLS on one side only)")

enum rdzv_status {
  RDZV_OK = 0,
#define RDZV_ERR_ENUM_(name, val, msg) RDZV_##name = (val),
  RDZV_ERRNO_MAP(RDZV_ERR_ENUM_)
#undef RDZV_ERR_ENUM_
};

/* Returns a static, human-readable message for any status: an rdzv code,
 * a negated errno, or 0. Never NULL. Thread-safe. */
const char *rdzv_strerror(int status);

/* Returns the symbolic name ("RDZV_EDEADLINE", "ECONNREFUSED", "OK") of a
 * status, or "UNKNOWN". Static storage, never NULL. Thread-safe. */
const char *rdzv_err_name(int status);

#ifdef __cplusplus
}
#endif
#endif /* RDZV_ERROR_H */
