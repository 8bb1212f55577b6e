/* SPDX-License-Identifier: Apache-2.0 */
/* A header that is valid C but not C++ (a parameter named "new"): check_header.sh must reject it. */
typedef enum { fcclSuccess = 0 } fcclResult_t;
fcclResult_t fcclBroken(int new);
