/*
 * Every environment parameter fccl reads: FCCL_PARAM(ID, TYPE, DEFAULT, DOC). The environment name is FCCL_<ID>.
 * docs/env.md must describe each (the env_doc unit test checks it).
 * No include guard: this file is an X-macro list, included with different definitions of FCCL_PARAM.
 */
FCCL_PARAM(DEBUG, FCCL_PARAM_STRING, "WARN", "Log level: NONE, VERSION, WARN, INFO or TRACE.")
FCCL_PARAM(DEBUG_SUBSYS, FCCL_PARAM_STRING, "INIT,BOOT,IPC,COLL,ENV,TOPO",
           "Comma list of subsystems to log (INIT, BOOT, IPC, COLL, ENV, TOPO, ALL); a leading ^ logs all but those.")
FCCL_PARAM(DEBUG_FILE, FCCL_PARAM_STRING, "",
           "Write logs to this file instead of stderr; %h expands to the host name, %p to the process id.")


/* ---- bootstrap ---- */

/* ---- transport ---- */

/* ---- collectives ---- */
