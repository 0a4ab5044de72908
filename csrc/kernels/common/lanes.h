/* Internal: the fixed tree that sums 16 float32 lanes (pyagent/linear.h's order), shared by the
 * kernels that sum in that order outside the linear kernel's tiles. */
#ifndef PAK_LANES_H
#define PAK_LANES_H

/* The 16 lanes summed as (j, j + 8), (j, j + 4), (j, j + 2), (0, 1). */
static inline float pak_sum_lanes(const float *lane)
{
    float half[8], quarter[4];
    for (int j = 0; j < 8; ++j)
        half[j] = lane[j] + lane[j + 8];
    for (int j = 0; j < 4; ++j)
        quarter[j] = half[j] + half[j + 4];
    return (quarter[0] + quarter[2]) + (quarter[1] + quarter[3]);
}

#endif
