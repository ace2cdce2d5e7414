# Memory per waiter against the number of waiters, in one process and one
# client (the waiters scenario at each size: 100 waiters per name).
# Called by scripts/bench.sh as:
#   gnuplot -e "outfile='OUT/waiters.png'; datafile='OUT/waiters.dat'; run='...'" bench/waiters.gp
# waiters.dat: "waiters names heap_bytes_per_waiter rss_bytes_per_waiter
# serve_seconds errors" lines, by waiters.
set terminal pngcairo size 960,600 font ",11" noenhanced
set output outfile
if (!exists("run")) run = "same machine, same redis-server"
set title "Memory per waiting hilock_acquire(), all waiting (one process, one client, 100 waiters per name)\n(" . run . ")"
set xlabel "waiters in the process (log scale)"
set ylabel "bytes per waiter"
set logscale x
set format x "%.0s%c"
set xrange [500:2000000]
set yrange [0:*]
set grid xtics ytics
set key bottom right box opaque
set linetype 1 linecolor rgb "#1f77b4"
set linetype 2 linecolor rgb "#9467bd"
plot datafile using 1:3 with linespoints linewidth 2 pointtype 7 pointsize 1.2 linetype 1 \
        title "heap (mallinfo2 in use: hilock's and hiredis's allocations)", \
     datafile using 1:4 with linespoints linewidth 2 pointtype 5 pointsize 1.2 linetype 2 \
        title "RSS", \
     datafile using 1:3:(sprintf("%.0f B", $3)) with labels offset 0,-1.3 notitle
