from sonde.cli import main

main()
