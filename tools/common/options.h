/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The tools parse their command lines with getopt_long, opterr = 0 and an optstring that starts with ':', and say
 * what is wrong in their own words, on the stream they choose. toolOptionProblem words getopt_long's '?' and ':'
 * from the option as typed.
 */
#ifndef FCCL_TOOL_OPTIONS_H_
#define FCCL_TOOL_OPTIONS_H_

#include <stddef.h>

/* c: what getopt_long returned ('?' or ':'); argv: the argv given to it. Uses getopt's optind and optopt. Writes
 * "unknown option --colour", "--nranks needs a value", "--json takes no value". */
void toolOptionProblem(int c, char* const* argv, char* out, size_t len);

#endif /* FCCL_TOOL_OPTIONS_H_ */
