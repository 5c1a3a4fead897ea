from memoryd.cli.main import main

main()
