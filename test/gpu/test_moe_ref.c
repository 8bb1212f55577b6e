/* SPDX-License-Identifier: Apache-2.0 */
/* Host reference for the mixture-of-experts tests (test_moe_ref.h). */
#include "test_moe_ref.h"

#include "test_allreduce_ref.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* splitmix64 of a combination of the arguments: every generated value is a pure function of them. */
static uint64_t mix(uint64_t a, uint64_t b, uint64_t c, uint64_t d, uint64_t e) {
  uint64_t z = a * 0x9e3779b97f4a7c15ull ^ b * 0xc2b2ae3d27d4eb4full ^ c * 0x165667b19e3779f9ull ^
               d * 0xd6e8feb86659fd93ull ^ e * 0xff51afd7ed558ccdull;
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

static uint64_t next(uint64_t* state) {
  uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

const char* moeRefRouteName(moeRoute_t route) {
  static const char* const names[] = {"random", "skewed", "hot", "sparse"};
  return (int)route >= 0 && route < MOE_ROUTE_KINDS ? names[route] : "unknown";
}

size_t moeRefTokens(const struct moeRefCase* c, int rank) {
  if (rank == c->emptyRank) return 0;
  if (c->fullTokens) return c->maxTokens;
  return 1 + (size_t)(mix(c->seed, c->call, (uint64_t)rank, 1, 0) % c->maxTokens);
}

/* Token t's whole row: the generator draws the entries in order, so a row is made at once. */
static void routeRow(const struct moeRefCase* c, int rank, size_t t, int64_t* row) {
  uint64_t state = mix(c->seed, c->call, (uint64_t)rank, (uint64_t)t, 2);
  const int k = c->topk, experts = c->experts;
  for (int j = 0; j < k; j++) row[j] = -1;
  int wanted = k;
  if (c->route == MOE_ROUTE_HOT) {
    row[0] = experts - 1;
    return;
  }
  if (c->route == MOE_ROUTE_SPARSE) {
    if (next(&state) % 2 == 0) return;
    wanted = k < 2 ? k : 1 + (int)(next(&state) % 2);
  }
  for (int j = 0; j < wanted; j++) {
    if (c->route == MOE_ROUTE_RANDOM && next(&state) % 8 == 0) continue; /* a -1 among the entries */
    for (int attempt = 0; attempt < 64; attempt++) {
      int64_t e;
      if (c->route == MOE_ROUTE_SKEWED) {
        const double u = (double)(next(&state) >> 11) / 9007199254740992.0;
        e = (int64_t)(u * u * u * experts);
      } else {
        e = (int64_t)(next(&state) % (uint64_t)experts);
      }
      int taken = 0;
      for (int i = 0; i < j; i++) taken |= row[i] == e;
      if (!taken) {
        row[j] = e;
        break;
      }
    }
  }
}

int64_t moeRefExpert(const struct moeRefCase* c, int rank, size_t t, int j) {
  int64_t row[MOE_REF_MAX_TOPK];
  routeRow(c, rank, t, row);
  return row[j];
}

void moeRefFillRouting(const struct moeRefCase* c, int rank, int64_t* topk) {
  const size_t tokens = moeRefTokens(c, rank);
  for (size_t t = 0; t < tokens; t++) routeRow(c, rank, t, topk + t * (size_t)c->topk);
}

float moeRefWeight(const struct moeRefCase* c, int rank, size_t t, int j) {
  const uint64_t h = mix(c->seed, c->call, (uint64_t)rank, (uint64_t)t, 3 + (uint64_t)j * 16);
  return (float)((h >> 40) | 1u) / 16777216.0f; /* (0, 1), 24 bits */
}

float moeRefToFloat(fcclDataType_t type, uint16_t bits) {
  return type == fcclFloat16 ? refHalfToFloat(bits) : refBf16ToFloat(bits);
}

uint16_t moeRefFromFloat(fcclDataType_t type, float value) {
  return type == fcclFloat16 ? refFloatToHalf(value) : refFloatToBf16(value);
}

float moeRefFp8ToFloat(uint8_t bits) {
  const int sign = bits >> 7, exponent = (bits >> 3) & 15, mantissa = bits & 7;
  if (exponent == 15 && mantissa == 7) return NAN;
  const float magnitude = exponent == 0 ? ldexpf((float)mantissa / 8.0f, -6)
                                        : ldexpf(1.0f + (float)mantissa / 8.0f, exponent - 7);
  return sign ? -magnitude : magnitude;
}

uint16_t moeRefX(const struct moeRefCase* c, int rank, size_t t, size_t i) {
  const uint64_t h = mix(c->seed, c->call, (uint64_t)rank, (uint64_t)t, 5 + (uint64_t)i * 8);
  if (c->type == fcclFloat8e4m3) {
    uint8_t byte = (uint8_t)h;
    if ((byte & 0x7f) == 0x7f) byte ^= 1; /* never the NaN */
    return byte;
  }
  return moeRefFromFloat(c->type, (float)((int)(h % 8192) - 4096) / 1024.0f);
}

float moeRefXScale(const struct moeRefCase* c, int rank, size_t t, size_t b) {
  const uint64_t h = mix(c->seed, c->call, (uint64_t)rank, (uint64_t)t, 7 + (uint64_t)b * 8);
  return ldexpf(1.0f + (float)((h >> 8) % 16) / 16.0f, -(int)(h % 8));
}

uint16_t moeRefExpertOut(const struct moeRefCase* c, int expert, int source, size_t t, size_t i) {
  const uint16_t x = moeRefX(c, source, t, i);
  if (c->identityExperts) return x;
  const float v = c->type == fcclFloat8e4m3 ? moeRefFp8ToFloat((uint8_t)x) : moeRefToFloat(c->type, x);
  return moeRefFromFloat(c->outType, v * (1.0f + (float)expert / 64.0f) + (float)(expert % 7) / 8.0f);
}

int moeRefEntryValid(const int64_t* row, int topk, int experts, int j) {
  if (j >= topk || row[j] < 0 || row[j] >= experts) return 0;
  for (int i = 0; i < j; i++)
    if (row[i] == row[j]) return 0;
  return 1;
}

size_t moeRefRecvRows(int nranks, int experts, int topk, size_t maxTokens, int padded, int alignment) {
  const size_t local = (size_t)(experts / nranks);
  if (padded) return local * (size_t)nranks * maxTokens;
  const size_t perToken = (size_t)topk < local ? (size_t)topk : local;
  return (size_t)nranks * maxTokens * perToken + local * (size_t)(alignment - 1);
}

int moeRefRecvBuild(int nranks, int experts, int topk, size_t maxTokens, int padded, int alignment, int receiver,
                    const struct moeRefRouting* routings, struct moeRefRecv* out) {
  memset(out, 0, sizeof(*out));
  const int local = experts / nranks;
  out->localExperts = local;
  out->recvRows = moeRefRecvRows(nranks, experts, topk, maxTokens, padded, alignment);
  out->counts = calloc((size_t)local, sizeof(int32_t));
  out->offsets = calloc((size_t)local + 1, sizeof(int32_t));
  out->rows = malloc(out->recvRows * sizeof(*out->rows));
  if (!out->counts || !out->offsets || !out->rows) {
    moeRefRecvFree(out);
    return 0;
  }
  for (size_t r = 0; r < out->recvRows; r++) out->rows[r] = (struct moeRefRow){-1, -1, -1, -1};
  size_t at = 0;
  for (int e = 0; e < local; e++) {
    const int64_t expert = (int64_t)receiver * local + e;
    const size_t start = padded ? (size_t)e * (size_t)nranks * maxTokens : at;
    size_t count = 0;
    for (int s = 0; s < nranks; s++)
      for (size_t t = 0; t < routings[s].tokens; t++) {
        const int64_t* row = routings[s].topk + t * (size_t)topk;
        for (int j = 0; j < topk; j++) {
          if (!moeRefEntryValid(row, topk, experts, j) || row[j] != expert) continue;
          if (start + count >= out->recvRows) {
            moeRefRecvFree(out);
            return 0;
          }
          out->rows[start + count++] = (struct moeRefRow){s, (int32_t)t, j, e};
        }
      }
    out->counts[e] = (int32_t)count;
    out->offsets[e] = (int32_t)start;
    at = start + (count + (size_t)alignment - 1) / (size_t)alignment * (size_t)alignment;
  }
  out->offsets[local] = (int32_t)(padded ? (size_t)local * (size_t)nranks * maxTokens : at);
  return 1;
}

void moeRefRecvFree(struct moeRefRecv* recv) {
  free(recv->counts);
  free(recv->offsets);
  free(recv->rows);
  memset(recv, 0, sizeof(*recv));
}

uint16_t moeRefCombine(const struct moeRefCase* c, int rank, size_t t, size_t i, int weighted, const int64_t* routed) {
  int64_t row[MOE_REF_MAX_TOPK];
  if (routed)
    memcpy(row, routed, (size_t)c->topk * sizeof(*row));
  else
    routeRow(c, rank, t, row);
  int order[MOE_REF_MAX_TOPK], n = 0;
  for (int j = 0; j < c->topk; j++)
    if (moeRefEntryValid(row, c->topk, c->experts, j)) order[n++] = j;
  for (int a = 1; a < n; a++) /* ascending expert index */
    for (int b = a; b > 0 && row[order[b - 1]] > row[order[b]]; b--) {
      const int swap = order[b];
      order[b] = order[b - 1];
      order[b - 1] = swap;
    }
  float acc = 0.0f;
  for (int a = 0; a < n; a++) {
    const int j = order[a];
    const float w = weighted ? moeRefWeight(c, rank, t, j) : 1.0f;
    const float y = moeRefToFloat(c->outType, moeRefExpertOut(c, (int)row[j], rank, t, i));
    acc = fmaf(w, y, acc);
  }
  return moeRefFromFloat(c->outType, acc);
}
