set -e
R=benchmarks/results/host_tier
export COLUMNS=200
F="-m deepseek-v4-flash -hw h200 -g 8 -c 128k"
P="-m deepseek-v4-pro -hw h200 -g 8 -c 128k"
python -m cli.main capacity $F --host-tier > $R/cli_capacity_dsv4flash_8xh200_128k.txt 2>&1
python -m cli.main capacity $F --host-tier --json > $R/cli_capacity_dsv4flash_8xh200_128k.json
python -m cli.main capacity $P --host-tier > $R/cli_capacity_dsv4pro_8xh200_128k.txt 2>&1
python -m cli.main capacity $P --host-tier --json > $R/cli_capacity_dsv4pro_8xh200_128k.json
for b in 64 2048; do
  python -m cli.main compare $F -b $b --host-tier > $R/cli_compare_dsv4flash_8xh200_128k_b$b.txt 2>&1
  python -m cli.main compare $F -b $b --host-tier --json > $R/cli_compare_dsv4flash_8xh200_128k_b$b.json
done
python -m cli.main compare $F -b 2048 --host-tier --host-page-rows 64 > $R/cli_compare_dsv4flash_8xh200_128k_b2048_pages64.txt 2>&1
python -m cli.main compare $F -b 2048 > $R/cli_compare_dsv4flash_8xh200_128k_b2048_hbm_only.txt 2>&1
python -m cli.main compare $P -b 512 --host-tier > $R/cli_compare_dsv4pro_8xh200_128k_b512.txt 2>&1
python -m cli.main compare $P -b 512 --host-tier --json > $R/cli_compare_dsv4pro_8xh200_128k_b512.json
W="--range 1:8192 --layouts tp/ep,dp/ep,dop/ep,cp/ep --host-tier"
python -m cli.main walls $F $W --plot $R/walls_dsv4flash_8xh200_128k.png > $R/walls_dsv4flash_8xh200_128k.txt 2>&1
python -m cli.main walls $F $W --json > $R/walls_dsv4flash_8xh200_128k.json
python -m cli.main walls $F $W --host-page-rows 64 --plot $R/walls_dsv4flash_8xh200_128k_pages64.png > $R/walls_dsv4flash_8xh200_128k_pages64.txt 2>&1
python -m cli.main walls $F $W --host-page-rows 64 --json > $R/walls_dsv4flash_8xh200_128k_pages64.json
python -m cli.main walls $P --range 1:4096 --layouts tp/tp,dop/tp,cp/tp --host-tier --plot $R/walls_dsv4pro_8xh200_128k.png > $R/walls_dsv4pro_8xh200_128k.txt 2>&1
python -m cli.main walls $P --range 1:4096 --layouts tp/tp,dop/tp,cp/tp --host-tier --json > $R/walls_dsv4pro_8xh200_128k.json
